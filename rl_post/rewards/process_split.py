"""Reward work split by process: each host scores its rows on its own pool.

In a multi-host run every process holds the whole rollout on the host (the
token ids are small) but verification, the expensive host work (sandboxed
execution, parsing untrusted text), is split: process p of P scores the
rows `process_block(n, p, P)` on its own `RewardPool` (its own workers and
sandboxes), and `result()` all-gathers the per-row verdicts so every
process builds the same `RewardBatch` with `scoring.combine`. The gather is
what keeps group advantages, metrics and the curriculum identical on every
host (the mixture samples the next tasks from that state), so a run over P
processes computes what one process would.

    pool = ProcessSplitPool(RewardPool(config, domain_options))
    pending = pool.submit(tasks_N, completions_N)   # this host's block starts
    batch = pending.result()                        # whole batch, on every host

With one process this is the wrapped pool, unchanged.
"""

import pickle
from typing import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardBatch, combine
from rl_post.tasks.base import Task


def process_block(n: int, process_index: int, process_count: int) -> slice:
  """Rows [start, stop) of n that process `process_index` scores (even split, in order)."""
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} is not in [0, {process_count})")
  return slice(process_index * n // process_count, (process_index + 1) * n // process_count)


def allgather_objects(obj) -> list:
  """`obj` of every process (picklable), in process order; a collective every process calls."""
  if jax.process_count() == 1:
    return [obj]
  data = np.frombuffer(pickle.dumps(obj), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.asarray([data.size], np.int64)))
  padded = np.zeros(int(sizes.max()), np.uint8)
  padded[:data.size] = data
  gathered = np.asarray(multihost_utils.process_allgather(padded[None], tiled=True))
  return [pickle.loads(gathered[p, :int(sizes[p, 0])].tobytes()) for p in range(len(gathered))]


class PendingSplit:
  """This process's block in flight; `result()` gathers every block (a collective)."""

  def __init__(self, local, tasks: list[Task], config):
    self.local, self.tasks, self.config = local, tasks, config

  def result(self) -> RewardBatch:
    mine = self.local.result()
    blocks = allgather_objects((mine.verdicts, mine.error_kinds, mine.deadline_timeouts))
    verdicts = [v for block, _, _ in blocks for v in block]
    kinds = [k for _, block, _ in blocks for k in block]
    if len(verdicts) != len(self.tasks):
      raise RuntimeError(f"processes returned {len(verdicts)} verdicts for {len(self.tasks)} "
                         "rows; every process must submit the same batch")
    return combine(self.tasks, verdicts, kinds, self.config, sum(n for *_, n in blocks))


class ProcessSplitPool:
  """A `RewardPool` that scores only this process's block of each batch.

  Every process must call `submit` with the same (tasks, completions), in
  the same order, and call `result()` on what it returns.
  """

  def __init__(self, pool: RewardPool):
    self.pool = pool
    self.config = pool.config

  @property
  def error_counts(self) -> dict:
    """Failures this host's pool saw (its own block of every batch)."""
    return self.pool.error_counts

  def submit(self, tasks: Sequence[Task], completions: Sequence[str]):
    tasks, completions = list(tasks), list(completions)
    if len(tasks) != len(completions):
      raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
    if jax.process_count() == 1:
      return self.pool.submit(tasks, completions)
    rows = process_block(len(tasks), jax.process_index(), jax.process_count())
    return PendingSplit(self.pool.submit(tasks[rows], completions[rows]), tasks, self.config)

  def score(self, tasks: Sequence[Task], completions: Sequence[str]) -> RewardBatch:
    return self.submit(tasks, completions).result()

  def close(self):
    self.pool.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
