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
