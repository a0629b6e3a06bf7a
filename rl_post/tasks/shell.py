"""Shell: a bash script that finds, counts, renames, edits, moves or deletes files.

The generator writes a directory tree and an instruction (`shell_tasks`);
the expected final tree is computed here. The script runs in the sandbox
with the tree as its work dir, and the verifier compares the files that
come back with the expected tree. Credit is over the paths that matter:
those the instruction changes plus those the script changed (or left as
symlinks or special files); a script that does nothing scores 0, and one
that also damages unrelated files loses credit for each. `answer.txt` is
compared line by line, trailing whitespace ignored; every other file must
match byte for byte. Full credit also needs the script to finish (not
time out or hit a limit).
"""

import numpy as np

from rl_post.sandbox import ExecResult, RunRequest
from rl_post.tasks import shell_tasks
from rl_post.tasks.base import Task, Verdict
from rl_post.tasks.sandboxed import Prepared, SandboxedDomain

_FINISHED = ("ok", "error")  # a script's last command may legitimately exit non-zero


def _normalise_answer(data: bytes) -> list[str] | None:
  try:
    lines = [line.rstrip() for line in data.decode("utf-8").split("\n")]
  except UnicodeDecodeError:
    return None
  while lines and not lines[-1]:
    lines.pop()
  return lines


def _same(path: str, got: bytes | None, expected: str | None) -> bool:
  if got is None or expected is None:
    return got is None and expected is None
  if path == shell_tasks.ANSWER:
    return _normalise_answer(got) == _normalise_answer(expected.encode())
  return got == expected.encode()


def tree_score(initial: dict, expected: dict, got: dict, omitted=()) -> float:
  """Fraction of the paths that matter that end up as expected."""
  initial_b = {p: c.encode() for p, c in initial.items()}
  relevant = {p for p in set(initial) | set(expected) if initial.get(p) != expected.get(p)}
  relevant |= {p for p in set(got) | set(initial) if got.get(p) != initial_b.get(p)}
  relevant |= {p for p in omitted if not p.endswith("/")}
  if not relevant:
    return 1.0
  good = sum(p not in omitted and _same(p, got.get(p), expected.get(p)) for p in relevant)
  return good / len(relevant)


class Shell(SandboxedDomain):
  """Generated directory trees and file-manipulation instructions."""

  name = "shell"

  def __init__(self, timeout_s: float = 5.0, memory_mb: int = 256):
    if not timeout_s > 0 or not memory_mb > 0:
      raise ValueError(f"shell: timeout_s and memory_mb must be > 0, got {timeout_s}, {memory_mb}")
    self.difficulty_levels = shell_tasks.LEVELS
    self.timeout_s = float(timeout_s)
    self.memory_mb = int(memory_mb)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    for _ in range(50):  # redraw instructions that would leave the tree unchanged
      tree = shell_tasks.make_tree(rng, difficulty)
      family, params, text, demo = shell_tasks.make_instruction(rng, difficulty, tree)
      expected = shell_tasks.apply(tree, family, params)
      if expected != tree:
        break
    listing = "\n".join(f"  {p}" for p in sorted(tree))
    prompt = (f"The current directory contains these files:\n{listing}\n{text}\n"
              f"Write a bash script that does this. {self.code_prompt('Bash')}")
    index = int(rng.integers(1 << 31))
    return Task(task_id=f"shell/{difficulty}/{family}/{index}", domain=self.name, prompt=prompt,
                difficulty=difficulty, target=expected,
                metadata={"files": tree, "family": family, "params": params, "script": demo})

  def demonstration(self, task: Task) -> str:
    return self.code_response("Use find, grep and sed on the tree.", task.metadata["script"],
                              "bash")

  def prepare(self, task: Task, completion: str) -> Prepared | Verdict:
    script = self.program(completion)
    if isinstance(script, Verdict):
      return script
    request = RunRequest(script, language="bash", files=dict(task.metadata["files"]),
                         timeout_s=self.timeout_s, memory_mb=self.memory_mb)
    return Prepared(request, None, script)

  def judge(self, task: Task, prepared: Prepared, result: ExecResult,
            format_ok: bool) -> Verdict:
    score = tree_score(task.metadata["files"], task.target, dict(result.files),
                       result.files_omitted)
    if result.status not in _FINISHED:
      score = min(score, 0.99)
    error = None if score == 1.0 else f"files differ (status={result.status})"
    return Verdict(score, format_ok, prepared.answer, error)
