"""One strict sandbox pool per test module for the sandbox-executed domains."""

import pytest

from rl_post.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def sb():
  pool = Sandbox(SandboxConfig(num_workers=2, timeout_s=5.0, memory_mb=256))
  yield pool
  pool.close()


def first_task(domain, rng, difficulty, predicate):
  """The first generated task at `difficulty` that satisfies `predicate`."""
  for _ in range(500):
    task = domain.generate(rng, difficulty)
    if predicate(task):
      return task
  raise AssertionError("no such task in 500 draws")
