"""SandboxedDomain: domains whose verifier executes model output.

A subclass turns each (task, completion) into a `Prepared` run (a sandbox
request plus whatever it needs to judge the result on the trusted side) and
judges the ExecResult. `verify_batch` sends every run of a batch through
one `sandbox.run_many`, each with the domain's per-task time budget, so a
slow or hung completion times out alone and scores 0. Expected values stay
in the host; nothing the model wrote is ever evaluated here.
"""

import abc
import dataclasses
from typing import Any, Sequence

from rl_post.sandbox import ExecResult, RunRequest
from rl_post.tasks.base import Domain, Task, Verdict, extract_answer, failed

MAX_PROGRAM_CHARS = 64_000  # far above any sensible answer, far below the sandbox's input cap
_FENCE = "```"


class SandboxRequiredError(ValueError):
  """A sandboxed domain was asked to verify without a sandbox."""


@dataclasses.dataclass(frozen=True)
class Prepared:
  """A run to execute for one completion, and its trusted-side state."""
  request: RunRequest
  state: Any = None
  answer: str | None = None


def extract_code(completion: str) -> str | None:
  """The program in a completion, or None; linear time.

  Looks inside the last complete <answer>...</answer> if there is one, else
  in the whole completion (chat models often answer with a bare fence).
  Takes the last complete ``` fenced block, dropping its language tag; an
  <answer> without a fence is taken as code as it is.
  """
  answer = extract_answer(completion)
  text = completion if answer is None else answer
  end = text.rfind(_FENCE)
  start = text.rfind(_FENCE, 0, end) if end >= 0 else -1
  if start < 0:
    return answer if answer and _FENCE not in answer else None
  body = text[start + len(_FENCE):end]
  first_line, newline, rest = body.partition("\n")
  if newline and (not first_line.strip() or first_line.strip().isidentifier()):
    body = rest  # a language tag such as "python", "sql", "bash"
  return body.strip("\n")


def answer_prompt(language: str) -> str:
  """The "tags" response-format instruction shared by the sandboxed domains."""
  return ("Think step by step inside <think></think>, then give the complete "
          f"{language} code inside <answer></answer> as a ```{language.lower()} "
          "fenced block.")


def fenced_response(thought: str, code: str, language: str) -> str:
  """A well-formatted response: reasoning, then the code in a fence."""
  return (f"<think>{thought}</think>\n<answer>\n```{language}\n{code.strip()}\n```\n"
          "</answer>")


class SandboxedDomain(Domain, abc.ABC):
  """A Domain verified by running model output in the shared sandbox.

  Attributes:
    timeout_s: wall-clock budget of one completion's run.
    memory_mb: memory limit of one completion's run.
  """

  timeout_s: float = 5.0
  memory_mb: int = 256
  # The program is read leniently in both (a bare fence counts under "tags" too);
  # the format decides the instruction, the demonstration and `format_ok`.
  answer_formats = ("tags", "code_block")

  def code_prompt(self, language: str) -> str:
    """The instruction for the program, in this domain's answer format."""
    if self.answer_format == "tags":
      return answer_prompt(language)
    return f"Give the complete {language} code in one ```{language.lower()} fenced block."

  def code_response(self, thought: str, code: str, language: str) -> str:
    """A demonstration: `thought`, then `code` in this domain's answer format."""
    if self.answer_format == "tags":
      return fenced_response(thought, code, language)
    return f"{thought}\n```{language}\n{code.strip()}\n```"

  def program(self, completion: str) -> str | Verdict:
    """The completion's code, or a zero Verdict saying why there is none."""
    return program_or_failure(completion, self.read(completion).format_ok)

  @abc.abstractmethod
  def prepare(self, task: Task, completion: str) -> Prepared | Verdict:
    """The run for `completion`, or a Verdict if nothing needs to run."""

  @abc.abstractmethod
  def judge(self, task: Task, prepared: Prepared, result: ExecResult,
            format_ok: bool) -> Verdict:
    """Scores a finished run on the trusted side."""

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    return self.verify_batch([task], [completion], sandbox=sandbox)[0]

  def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str], *,
                   sandbox=None) -> list[Verdict]:
    """Verdicts for a batch, executed with one `sandbox.run_many`.

    Raises:
      SandboxRequiredError: `sandbox` is None.
      ValueError: tasks and completions differ in length.
    """
    if sandbox is None:
      raise SandboxRequiredError(
          f"domain {self.name!r} executes model output and needs the shared "
          "rl_post.sandbox.Sandbox: pass sandbox=... (the reward path does)")
    if len(tasks) != len(completions):
      raise ValueError(f"{self.name}: {len(tasks)} tasks but {len(completions)} completions")
    verdicts: list[Verdict | None] = []
    pending: list[tuple[int, Prepared]] = []
    for i, (task, completion) in enumerate(zip(tasks, completions)):
      verdict = self._prepare_one(task, completion)
      if isinstance(verdict, Prepared):
        pending.append((i, verdict))
        verdict = None
      verdicts.append(verdict)
    results = _run_all(sandbox, [p.request for _, p in pending])
    for (i, prepared), result in zip(pending, results):
      format_ok = self.read(completions[i]).format_ok
      if isinstance(result, str):
        verdicts[i] = Verdict(0.0, format_ok, prepared.answer, result)
        continue
      try:
        verdicts[i] = _label_failure(self.judge(tasks[i], prepared, result, format_ok), result)
      except Exception as e:  # pylint: disable=broad-except
        verdicts[i] = Verdict(0.0, format_ok, prepared.answer,
                              f"verifier error: {type(e).__name__}: {e}"[:300])
    return verdicts

  def _prepare_one(self, task: Task, completion: str) -> Prepared | Verdict:
    if not isinstance(completion, str):
      return failed(f"completion must be a str, got {type(completion).__name__}")
    if task.domain != self.name:
      return failed(f"task {task.task_id!r} belongs to domain {task.domain!r}, not {self.name!r}")
    try:
      return self.prepare(task, completion)
    except Exception as e:  # pylint: disable=broad-except
      return failed(f"cannot prepare run: {type(e).__name__}: {e}"[:300])


def _label_failure(verdict: Verdict, result: ExecResult) -> Verdict:
  """Prefixes the error of a run that timed out ("timeout: ...") or that the
  sandbox failed ("verifier error: ..."), the prefixes the reward path counts."""
  prefix = {"timeout": "timeout", "sandbox_error": "verifier error"}.get(result.status)
  if prefix is None or verdict.correct or (verdict.error or "").startswith(prefix):
    return verdict
  detail = result.message if result.status == "sandbox_error" else verdict.error
  return dataclasses.replace(verdict, error=f"{prefix}: {detail}"[:300])


def _run_all(sandbox, requests: list[RunRequest]) -> list[ExecResult | str]:
  """One `run_many` for the batch; a request the sandbox rejects fails alone."""
  if not requests:
    return []
  try:
    return sandbox.run_many(requests)
  except ValueError:
    pass
  out: list[ExecResult | str] = []
  for req in requests:
    try:
      out.extend(sandbox.run_many([req]))
    except ValueError as e:
      out.append(f"sandbox rejected the run: {e}"[:300])
  return out


def program_or_failure(completion: str, format_ok: bool) -> str | Verdict:
  """The completion's code, or a zero Verdict (with `format_ok`) saying why there is none."""
  code = extract_code(completion)
  if code is None or not code.strip():
    return Verdict(0.0, format_ok, None, "no code found")
  if len(code) > MAX_PROGRAM_CHARS:
    return Verdict(0.0, format_ok, code[:256], f"code longer than {MAX_PROGRAM_CHARS} chars")
  if "\x00" in code:
    return Verdict(0.0, format_ok, code[:256], "code contains a NUL byte")
  return code
