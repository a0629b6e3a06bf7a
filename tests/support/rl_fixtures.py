"""Test-only domains, importable by path from reward worker processes."""

import time

import numpy as np

from rl_post.tasks.base import Domain, Task, Verdict

DIGIT_DOMAIN = "rl_fixtures:ContainsDigit"
SLOW_DOMAIN = "rl_fixtures:SlowVerifier"


class ContainsDigit(Domain):
  """Trivially learnable: a completion is correct if it contains a digit."""

  name = DIGIT_DOMAIN
  difficulty_levels = (1,)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    i = int(rng.integers(0, 10 ** 6))
    return Task(task_id=f"digit/{i}", domain=self.name, prompt=f"Say a number ({i % 7}).",
                difficulty=difficulty, target=None)

  def demonstration(self, task: Task) -> str:
    return "<think>a</think>\n<answer>7</answer>"

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    return Verdict(any(c.isdigit() for c in completion), True, completion[:8])


class SlowVerifier(ContainsDigit):
  """Hangs on completions that contain "hang"; crashes on "crash"."""

  name = SLOW_DOMAIN

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    if "hang" in completion:
      time.sleep(60)
    if "crash" in completion:
      raise RuntimeError("verifier bug")
    return super().verify(task, completion, sandbox=sandbox)


FAULTY_DOMAIN = "rl_fixtures:FaultyVerifier"
BATCH_DOMAIN = "rl_fixtures:SandboxBatchVerifier"


def _tampered(**fields) -> Verdict:
  """A verdict whose fields were changed after validation (what a buggy or
  hostile verifier can send; the trusted side must catch it)."""
  verdict = Verdict(1.0, True)
  for name, value in fields.items():
    object.__setattr__(verdict, name, value)
  return verdict


class FaultyVerifier(ContainsDigit):
  """Fails in the way its task's target or its completion names; otherwise
  ContainsDigit.

  Each instance counts how often its class was built in this process and
  reports "<pid>:<builds>" as the answer. With `faults` (option), generated
  task i has target faults[i % len(faults)] (None = no fault), so a
  training run's verifier mix fails on schedule whatever the model writes.
  """

  name = FAULTY_DOMAIN
  builds = 0

  def __init__(self, faults=()):
    FaultyVerifier.builds += 1
    self.faults = tuple(faults)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    task = super().generate(rng, difficulty)
    if not self.faults:
      return task
    i = int(rng.integers(0, 1 << 30))
    return Task(f"faulty/{i}", self.name, task.prompt, difficulty,
                self.faults[i % len(self.faults)])

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    import ctypes
    import os
    import signal
    faults = {
        "exit": lambda: os._exit(3),
        "segfault": lambda: ctypes.string_at(0),
        "sigkill": lambda: os.kill(os.getpid(), signal.SIGKILL),  # what the OOM killer does
        "hang": lambda: time.sleep(600),
        "raise": lambda: 1 / 0,
        "nan": lambda: _tampered(score=float("nan")),
        "huge": lambda: _tampered(score=1e300),
        "floatbool": lambda: _tampered(format_ok=0.5),
        "badspan": lambda: _tampered(step_scores=((0, 1, float("inf")),)),
        "notverdict": lambda: {"score": 1.0},
        "invalid": lambda: Verdict(float("nan"), True),
    }
    fault = task.target if task.target in faults else completion
    if fault in faults:
      return faults[fault]()
    return Verdict(float(any(c.isdigit() for c in completion)), True,
                   f"{os.getpid()}:{FaultyVerifier.builds}")


class SandboxBatchVerifier(ContainsDigit):
  """Grades a batch with one sandbox.run_many: correct iff the completion,
  run as Python, prints 1; step scores credit the first character."""

  name = BATCH_DOMAIN

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    return self.verify_batch([task], [completion], sandbox=sandbox)[0]

  def verify_batch(self, tasks, completions, *, sandbox=None):
    results = sandbox.run_many(list(completions))
    return [Verdict(float(r.status == "ok" and r.stdout.strip() == "1"), True,
                    r.stdout[:8], None, {"efficiency": 0.5}, ((0, 1, 1.0),))
            for r in results]


STEP_DOMAIN = "rl_fixtures:EvenDigitSteps"


class EvenDigitSteps(ContainsDigit):
  """ContainsDigit with process credit: every digit written is a step,
  right when even (a one-character span), and `process` is their share."""

  name = STEP_DOMAIN

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    spans = tuple((i, i + 1, float(int(c) % 2 == 0)) for i, c in enumerate(completion)
                  if c in "0123456789")
    process = sum(s for *_, s in spans) / max(len(spans), 1)
    return Verdict(bool(spans), True, completion[:8], components={"process": process},
                   step_scores=spans)


VARIED_DOMAIN = "rl_fixtures:VariedLengthDigit"


class VariedLengthDigit(ContainsDigit):
  """ContainsDigit with prompts of 0-3 extra words: batches land in different
  prompt buckets and share prefixes of different lengths."""

  name = VARIED_DOMAIN

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    task = super().generate(rng, difficulty)
    words = " ".join(["please"] * int(rng.integers(0, 4)))
    return Task(task.task_id, self.name, f"{words} {task.prompt}".strip(), difficulty, None)
