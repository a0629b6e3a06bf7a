"""The `Tool` interface and the state a tool acts on (`Workspace`, `ToolLimits`).

A tool is one class: its name, argument schema and one-line description
(what the prompt lists), the `RunRequest` it builds from a validated call
(out of the sandbox's generic run kinds: python, bash, sql) and how the
run's `ExecResult` becomes the model's observation and the episode's new
state. The call plumbing around it (parsing, budgets, one `run_many` for
all episodes, truncation) is `rl_post.envs.tools.calls`.

  class Shout(Tool):
    name = "shout"
    arguments = {"text": (str, True)}
    description = 'shout {"text": str}: the text in capitals'

    def request(self, arguments, workspace, *, timeout_s, memory_mb):
      return RunRequest("tr a-z A-Z", "bash", stdin=arguments["text"],
                        timeout_s=timeout_s, memory_mb=memory_mb)

A tool with `sandboxed = False` runs nothing: `answer` handles the call on
the host, charges no tool time and is offered even when the episode's
budget is spent (`submit`). Such a tool must never execute model text.
Tools hold no per-episode state; everything an episode keeps lives in its
`Workspace`.
"""

import dataclasses
from typing import Any, Mapping, Optional

from rl_post.envs.protocol import ProtocolError
from rl_post.sandbox import ExecResult, RunRequest

REJECTED = "request rejected:"


@dataclasses.dataclass(frozen=True)
class ToolLimits:
  """Time and size limits of the tools (seconds are sandbox wall time).

  max_output_chars bounds the whole text of every tool response (output,
  appended notes, error messages), truncation marker included.
  """
  per_call_s: float = 5.0
  per_episode_s: float = 30.0
  min_call_s: float = 0.1
  max_output_chars: int = 2000
  memory_mb: int = 256

  def __post_init__(self):
    for name in ("per_call_s", "per_episode_s", "min_call_s", "max_output_chars",
                 "memory_mb"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"ToolLimits.{name} must be a number > 0, got {value!r}")


@dataclasses.dataclass
class Workspace:
  """One episode's state: its work dir, its database, its tool time."""
  files: dict
  db: Optional[bytes] = None
  tool_seconds: float = 0.0
  submitted: Optional[str] = None

  def snapshot(self):
    """A copy for the verifier (the bytes are immutable)."""
    return Workspace(dict(self.files), self.db, self.tool_seconds, self.submitted)


@dataclasses.dataclass(frozen=True)
class CallOutcome:
  tool: str
  observation: str
  error_kind: Optional[str]       # None: the call succeeded
  seconds: float = 0.0            # sandbox wall time charged
  submitted: bool = False         # the call ends the episode


def status_kind(result: ExecResult) -> Optional[str]:
  """The error kind of a run's status (None for "ok")."""
  return {"ok": None, "timeout": "timeout", "output_limit": "output_truncated",
          "sandbox_error": "sandbox_error"}.get(result.status, "tool_error")


def output_text(result: ExecResult) -> str:
  """stdout, then `[stderr]` and stderr, then a note on a status other than "ok"."""
  text = result.stdout
  if result.stderr:
    text += ("" if not text or text.endswith("\n") else "\n") + "[stderr]\n" + result.stderr
  if result.status == "timeout":
    text += f"\n[timed out after {result.wall_s:.1f} s]"
  elif result.status == "sandbox_error" and result.message.startswith(REJECTED):
    text += f"\n[nothing ran: {result.message[:300]}]"
  elif result.status == "sandbox_error":  # internal details stay in the sandbox's stats
    text += "\n[the sandbox failed; nothing ran]"
  elif result.status != "ok":
    text += f"\n[{result.status}, exit code {result.returncode}]"
  return text.strip("\n") or "(no output)"


class Tool:
  """A tool the model calls by name; subclass it and set the class attributes.

  Attributes:
    name: what the model writes in `{"name": ...}`.
    arguments: argument -> (type, required); `check` enforces it.
    description: the line the prompt lists for this tool.
    examples: argument dicts of well-formed calls (the call-vocabulary
      tokenizer makes each one a single token, so random models call it).
    sandboxed: True: the call runs `request` in the sandbox; False: `answer`
      handles it on the host.
  """
  name: str = ""
  arguments: Mapping[str, tuple] = {}
  description: str = ""
  examples: tuple = ()
  sandboxed: bool = True

  def check(self, arguments: Mapping[str, Any]) -> Optional[ProtocolError]:
    """A "bad_arguments" error for arguments off the schema, else None."""
    unexpected = sorted(set(arguments) - set(self.arguments))
    if unexpected:
      return ProtocolError("bad_arguments", f"{self.name}: unexpected arguments {unexpected}; "
                           f"takes {sorted(self.arguments)}")
    for arg, (kind, required) in self.arguments.items():
      if arg not in arguments:
        if required:
          return ProtocolError("bad_arguments", f"{self.name}: missing argument {arg!r}")
      elif not isinstance(arguments[arg], kind):
        return ProtocolError("bad_arguments", f"{self.name}: argument {arg!r} must be "
                             f"{kind.__name__}, got {type(arguments[arg]).__name__}")
    return None

  def request(self, arguments: Mapping[str, Any], workspace: Workspace, *, timeout_s: float,
              memory_mb: int) -> RunRequest:
    """The run for a checked call (a sandboxed tool must define it).

    Args:
      arguments: the call's arguments, already through `check`.
      workspace: the episode's state; read it, do not change it here.
      timeout_s, memory_mb: the limits the run must carry (the call's share
        of the episode's budget).
    """
    raise NotImplementedError(f"tool {self.name!r} is sandboxed and defines no request()")

  def apply(self, arguments: Mapping[str, Any], workspace: Workspace,
            result: ExecResult) -> str:
    """Updates the workspace after a run that reached the sandbox (any status
    but "sandbox_error"); returns a note appended after the output, or "".
    Output and note together are cut to `max_output_chars`, the note keeping
    up to half of it. The default keeps nothing (a stateless tool)."""
    return ""

  def output(self, arguments: Mapping[str, Any], result: ExecResult) -> str:
    """The observation text of a run, before truncation."""
    return output_text(result)

  def answer(self, arguments: Mapping[str, Any], workspace: Workspace) -> CallOutcome:
    """The outcome of a call of a host-side tool (`sandboxed = False`)."""
    raise NotImplementedError(f"tool {self.name!r} is not sandboxed and defines no answer()")

  def __repr__(self):
    return f"{type(self).__name__}(name={self.name!r})"
