"""The tools: python, bash, sql and submit, run in the strict sandbox.

A call is handled in two halves so that the calls of many episodes go
through one `Sandbox.run_many`: `plan_call` validates it and builds the
`RunRequest` (or an immediate answer), `finish_call` turns the
`ExecResult` into the observation and updates the episode's workspace.

Persistence. The sandbox gives every run a fresh tmpfs work dir and returns
the regular files left in it (`ExecResult.files`); it has no persistent
work dir. The episode's work dir is therefore carried host-side in
`Workspace.files`: every bash call gets the episode's files as its input
files and the files it leaves become the new state. What persists is
exactly the regular files of the work dir (names, bytes); empty
directories, symlinks and permission bits do not, nor does anything
outside the work dir. Files beyond the sandbox's `max_files_out` /
`max_files_out_mb` are dropped and reported to the model. No other
episode's files are ever sent to a run, so work dirs cannot leak across
episodes. `python` runs on a copy of the files and its changes are
discarded (stateless); `sql` runs on the episode's copy of the database
(`db.sqlite`), and committed writes persist for that episode only.

Budgets. Each call runs with `min(per_call_s, what is left of
per_episode_s)`; the sandbox's measured wall time of every run is charged
to the episode, and a call with less than `min_call_s` left is refused
("budget_exhausted") without running.
"""

import dataclasses
from typing import Mapping, Optional

from rl_post.envs import protocol
from rl_post.envs.protocol import ProtocolError, ToolCall
from rl_post.sandbox import ExecResult, RunRequest
from rl_post.sandbox import request as request_lib
from rl_post.sandbox import result as result_lib

DB_FILE = "db.sqlite"
PYTHON_LAUNCH = "exec python3 -"
REJECTED = "request rejected:"

# name -> {argument: (type, required)}
TOOL_ARGUMENTS = {
    "python": {"code": (str, True)},
    "bash": {"command": (str, True)},
    "sql": {"query": (str, True)},
    "submit": {"answer": (str, False)},
}

TOOL_DESCRIPTIONS = {
    "python": 'python {"code": str}: runs a Python 3 program (stdlib only) on a copy of '
              "the work dir; its changes are discarded",
    "bash": 'bash {"command": str}: runs a bash script in the work dir; files persist '
            "across this episode's calls",
    "sql": 'sql {"query": str}: runs SQLite statements on the episode\'s database; rows '
           "of the last query are printed as JSON lines",
    "submit": 'submit {"answer": str}: ends the episode with your answer',
}


@dataclasses.dataclass(frozen=True)
class ToolLimits:
  """Time and size limits of the tools (seconds are sandbox wall time)."""
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
class PlannedCall:
  """A validated call: `request` to run, or an immediate `answer`/`error`."""
  tool: str                       # the tool name ("" when unparsable)
  request: Optional[RunRequest] = None
  error: Optional[ProtocolError] = None
  answer: Optional[str] = None    # for submit


@dataclasses.dataclass(frozen=True)
class CallOutcome:
  tool: str
  observation: str
  error_kind: Optional[str]       # None: the call succeeded
  seconds: float = 0.0            # sandbox wall time charged
  submitted: bool = False


def check_arguments(call: ToolCall) -> Optional[ProtocolError]:
  spec = TOOL_ARGUMENTS[call.name]
  unexpected = sorted(set(call.arguments) - set(spec))
  if unexpected:
    return ProtocolError("bad_arguments", f"{call.name}: unexpected arguments {unexpected}; "
                         f"takes {sorted(spec)}")
  for arg, (kind, required) in spec.items():
    if arg not in call.arguments:
      if required:
        return ProtocolError("bad_arguments", f"{call.name}: missing argument {arg!r}")
    elif not isinstance(call.arguments[arg], kind):
      return ProtocolError("bad_arguments", f"{call.name}: argument {arg!r} must be "
                           f"{kind.__name__}, got {type(call.arguments[arg]).__name__}")
  return None


def plan_call(call, workspace: Workspace, tools, limits: ToolLimits) -> PlannedCall:
  """Validates a parsed call (or carries a parse error) and builds its run."""
  if isinstance(call, ProtocolError):
    return PlannedCall("", error=call)
  if call.name not in tools:
    return PlannedCall(call.name if len(call.name) <= 40 else "", error=ProtocolError(
        "unknown_tool", f"no tool {call.name[:40]!r}; available: {', '.join(tools)}"))
  error = check_arguments(call)
  if error is not None:
    return PlannedCall(call.name, error=error)
  if call.name == "submit":
    return PlannedCall("submit", answer=call.arguments.get("answer", ""))
  left = limits.per_episode_s - workspace.tool_seconds
  if left < limits.min_call_s:
    return PlannedCall(call.name, error=ProtocolError(
        "budget_exhausted", f"the episode's tool time ({limits.per_episode_s} s) is spent"))
  timeout = min(limits.per_call_s, left)
  if call.name == "python":
    # `python3 -` in the work dir (program on stdin), as a model expects from
    # running a script there: the work dir's packages are importable.
    request = RunRequest(PYTHON_LAUNCH, "bash", stdin=call.arguments["code"],
                         files=workspace.files, timeout_s=timeout, memory_mb=limits.memory_mb)
  elif call.name == "bash":
    request = RunRequest(call.arguments["command"], "bash", files=workspace.files,
                         timeout_s=timeout, memory_mb=limits.memory_mb)
  else:
    files = {DB_FILE: workspace.db} if workspace.db is not None else {}
    request = RunRequest(call.arguments["query"], "sql", files=files, timeout_s=timeout,
                         memory_mb=limits.memory_mb)
  return PlannedCall(call.name, request=request)


def _status_kind(result: ExecResult) -> Optional[str]:
  return {"ok": None, "timeout": "timeout", "output_limit": "output_truncated",
          "sandbox_error": "sandbox_error"}.get(result.status, "tool_error")


def _output_text(result: ExecResult) -> str:
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


def finish_call(planned: PlannedCall, workspace: Workspace, result: Optional[ExecResult],
                limits: ToolLimits) -> CallOutcome:
  """Applies a call's result to the workspace; returns what the model sees."""
  if planned.error is not None:
    return CallOutcome(planned.tool, protocol.format_error(planned.error), planned.error.kind)
  if planned.tool == "submit":
    workspace.submitted = planned.answer
    return CallOutcome("submit", "submitted", None, submitted=True)
  seconds = float(result.wall_s)
  workspace.tool_seconds += seconds
  kind = _status_kind(result)
  dropped = ()
  if result.status != "sandbox_error":
    if planned.tool == "bash":
      workspace.files = dict(result.files)
      dropped = result.files_omitted
    elif planned.tool == "sql" and DB_FILE in result.files:
      workspace.db = result.files[DB_FILE]
  text, cut = protocol.truncate(_output_text(result), limits.max_output_chars)
  if dropped:
    text += f"\n[not kept in the work dir: {', '.join(dropped[:10])}]"
  if cut and kind is None:
    kind = "output_truncated"
  return CallOutcome(planned.tool, text, kind, seconds)


def run_planned(sandbox, planned: list) -> list:
  """ExecResults for the planned calls that need a run (None for the rest).

  All runs go through one `run_many`. A request the sandbox rejects (e.g.
  a work dir grown past `max_input_bytes`) becomes a sandbox_error result
  for that call alone.
  """
  out = [None] * len(planned)
  valid = []
  for i, p in enumerate(planned):
    if p is None or p.request is None:
      continue
    try:
      request_lib.to_wire(sandbox.config, p.request)
      valid.append(i)
    except ValueError as e:
      out[i] = result_lib.sandbox_error(f"{REJECTED} {e}")
  if valid:
    for i, result in zip(valid, sandbox.run_many([planned[i].request for i in valid])):
      out[i] = result
  return out
