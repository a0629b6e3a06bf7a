"""A verifier that takes a fixed time per completion (experiments/benchmarks/async_rewards.py)."""

import time

import numpy as np

from rl_post.tasks.base import Domain, Task, Verdict


class SlowDigit(Domain):
  """Correct if the completion holds a digit; takes `verify_ms` per completion."""

  name = "slow_verifier:SlowDigit"
  difficulty_levels = (1,)

  def __init__(self, verify_ms: int = 40):
    self.verify_s = verify_ms / 1000.0

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    i = int(rng.integers(0, 10 ** 6))
    return Task(f"slow/{i}", self.name, f"Say a number ({i % 7}).", difficulty, None)

  def demonstration(self, task: Task) -> str:
    return "<answer>7</answer>"

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    time.sleep(self.verify_s)
    return Verdict(any(c.isdigit() for c in completion), True, completion[:8])
