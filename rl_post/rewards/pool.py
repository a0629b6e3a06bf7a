"""Verifiers run outside the training process, under a time limit.

A spawned process pool (never fork: the trainer process holds JAX threads)
scores chunks of completions. `submit` returns a future, so the trainer can
generate the next batch while rewards are computed. A chunk that exceeds
the time limit scores zero with a counted "timeout" error, and the pool is
replaced so a stuck verifier cannot stall training.
"""

import concurrent.futures as cf
import multiprocessing
import time
from typing import Sequence

import numpy as np

from rl_post.rewards.scoring import RewardBatch, RewardConfig, combine, verify_all
from rl_post.tasks.base import Task, Verdict


def _warm_up() -> bool:
  """Runs in each new worker: imports the verifiers once."""
  from rl_post.tasks import registry  # noqa: F401
  return True


class RewardPool:
  """Scores (task, completion) pairs in worker processes."""

  def __init__(self, config: RewardConfig, domain_options=None, startup_timeout_s: float = 300):
    self.config = config
    self.domain_options = {k: dict(v) for k, v in (domain_options or {}).items()}
    self.startup_timeout_s = startup_timeout_s
    self._executor = self._new_executor()
    self.timeouts = 0

  def _new_executor(self):
    """A started pool: worker start-up (imports) never counts against timeout_s."""
    if self.config.num_workers == 0:
      return None
    executor = cf.ProcessPoolExecutor(self.config.num_workers,
                                      mp_context=multiprocessing.get_context("spawn"))
    warmups = [executor.submit(_warm_up) for _ in range(self.config.num_workers)]
    for future in warmups:
      future.result(timeout=self.startup_timeout_s)
    return executor

  def _chunks(self, n):
    k = max(self.config.num_workers, 1)
    bounds = np.linspace(0, n, k + 1).astype(int)
    return [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]

  def submit(self, tasks: Sequence[Task], completions: Sequence[str]) -> "PendingRewards":
    """Starts scoring; `.result()` on the return value gives a RewardBatch."""
    if len(tasks) != len(completions):
      raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
    if self._executor is None:
      return PendingRewards(self, None, verify_all(tasks, completions, self.domain_options))
    futures = [(lo, hi, self._executor.submit(verify_all, tasks[lo:hi], completions[lo:hi],
                                              self.domain_options))
               for lo, hi in self._chunks(len(tasks))]
    return PendingRewards(self, futures, len(tasks))

  def score(self, tasks, completions) -> RewardBatch:
    return self.submit(tasks, completions).result()

  def _restart(self):
    executor, self._executor = self._executor, self._new_executor()
    for process in list(getattr(executor, "_processes", {}).values()):
      process.kill()
    executor.shutdown(wait=False, cancel_futures=True)

  def close(self):
    if self._executor is not None:
      self._executor.shutdown(wait=True, cancel_futures=True)
      self._executor = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


class PendingRewards:
  """A reward computation in flight."""

  def __init__(self, pool: RewardPool, futures, payload):
    self._pool, self._futures, self._payload = pool, futures, payload
    self._start = time.monotonic()

  def result(self) -> RewardBatch:
    if self._futures is None:
      return combine(self._payload, self._pool.config)
    verdicts: list[Verdict | None] = [None] * self._payload
    deadline = self._start + self._pool.config.timeout_s
    timed_out = False
    for lo, hi, future in self._futures:
      try:
        verdicts[lo:hi] = future.result(timeout=max(deadline - time.monotonic(), 0.0))
      except cf.TimeoutError:
        timed_out = True
        verdicts[lo:hi] = [Verdict(False, False, None, "timeout")] * (hi - lo)
      except Exception as e:  # a dead worker: count it, score zero
        verdicts[lo:hi] = [Verdict(False, False, None, f"verifier error: {e!r}")] * (hi - lo)
    if timed_out:
      self._pool.timeouts += 1
      self._pool._restart()
    return combine(verdicts, self._pool.config)
