"""Shared fixtures: one strict pool per test module, plus host checks.

These tests are real attacks and run in strict mode. If strict isolation is
unavailable they fail loudly (never skip): CI installs bubblewrap.
"""

import os
import time
import types

import pytest

from rl_post.sandbox import Sandbox, SandboxConfig

# A secret in the host environment that no candidate may read.
SECRET = "rl-post-host-secret-" + os.urandom(8).hex()
os.environ["RL_POST_TEST_SECRET"] = SECRET

WORKER_TASKS = 3  # outer bwrap, bwrap's pid-1, zygote
# In strict mode each worker keeps the next run prepared: its runner (pid 1
# of fresh namespaces) and its candidate, confined and waiting.
PREPARED = ("sb-candidate", "sb-runner")


def make_pool(**overrides):
  kwargs = dict(num_workers=2, timeout_s=5.0, memory_mb=256)
  kwargs.update(overrides)
  return Sandbox(SandboxConfig(**kwargs))


@pytest.fixture(scope="module")
def sb():
  pool = make_pool()
  yield pool
  pool.close()


def _comm(pid):
  try:
    with open(f"/proc/{pid}/comm") as f:
      return f.read().strip()
  except OSError:
    return None


def worker_processes(pool):
  """Names of the live processes per worker (from the worker cgroups)."""
  return [sorted(filter(None, map(_comm, w.cgroup.pids())))
          if w.cgroup is not None else None
          for w in pool._workers]  # pylint: disable=protected-access


def assert_no_leftovers(pool, timeout_s=3.0):
  """Every worker's cgroup holds only the worker itself (no run survivors)."""
  if pool.config.cgroups == "off":
    return
  assert pool.stats()["cgroups"] is not None, (
      "tests expect cgroups (run as root, as CI does)")
  strict = pool.config.isolation == "strict"
  deadline = time.monotonic() + timeout_s

  def clean(n):
    if not strict:
      return len(n) == 1
    # The worker's own processes, plus the next run's runner and candidate
    # when it was prepared ahead; any survivor of a run would be one more.
    run_procs = [x for x in n if x.startswith("sb-")]
    return (len(n) - len(run_procs) == WORKER_TASKS and
            run_procs in ([], list(PREPARED)))

  while True:
    names = worker_processes(pool)
    if all(clean(n) for n in names):
      return
    if time.monotonic() > deadline:
      raise AssertionError(f"processes left in workers: {names}")
    time.sleep(0.05)


def assert_healthy(pool):
  """The pool still answers correctly on every worker afterwards."""
  results = pool.run_many(["print(41 + 1)"] * (2 * pool.config.num_workers))
  for r in results:
    assert r.status == "ok" and r.stdout == "42\n", r
  assert_no_leftovers(pool)


def assert_attack_contained(pool, result, status):
  statuses = status if isinstance(status, tuple) else (status,)
  assert result.status in statuses, result
  assert_no_leftovers(pool)
  assert_healthy(pool)


@pytest.fixture(scope="session")
def pool_factory():
  """make_pool(**SandboxConfig overrides) for modules that need their own."""
  return make_pool


@pytest.fixture(scope="session")
def check():
  """The host-side checks every attack test makes."""
  return types.SimpleNamespace(
      contained=assert_attack_contained, healthy=assert_healthy,
      no_leftovers=assert_no_leftovers, secret=SECRET)
