"""Rollouts generated ahead of the update while their rewards are scored.

With `rl.async_rewards`, iteration t's loop body is

    fill:  launch rollouts t .. t + staleness not yet launched, each with
           the current policy: generate, then `pool.submit` (returns at
           once; the workers score while the next batch is generated)
    pop:   the oldest launched rollout (iteration t); wait for its rewards
    update on it

so the rewards of batch t are computed while batch t+1 is generated, and a
batch is trained on at most `staleness` updates after the policy that
sampled it. The update's importance ratio uses the behaviour log-probs the
sampler recorded, so a stale batch is corrected like any off-policy one.
With `rl.overlap_update` the launches of an iteration may run while the
previous update does, with the params from before it (an older `version`;
rl/overlap_update.py), so the lag is at most `staleness + 1`.
`staleness = 0` launches and pops the same iteration in one step: the
order, keys and numbers of the synchronous loop. A reward batch deadline
(`rewards.batch_timeout_s`, rewards/pool.py) runs from `pool.submit`, so
it bounds the wait at pop as it bounds a synchronous step: the scoring
that overlapped generation counts against it.

Checkpoints: the pipeline is drained at checkpoint boundaries instead of
checkpointing rollouts in flight. A rollout is never launched across an
iteration that ends in a `checkpoint_every` save, so a run resumed from a
checkpoint has nothing in flight, exactly like the uninterrupted run at
that point: resume is exact. (A SIGTERM save off that grid, or a guard
rollback, drops what is in flight; the resumed run regenerates those at
most `staleness` batches from the saved policy.)
"""

import collections
import dataclasses
from typing import Any, Callable, Optional


@dataclasses.dataclass
class InFlight:
  """One launched rollout.

  Attributes:
    iteration: the loop iteration (0-based) that trains on it.
    policy_version: iterations completed by the policy that sampled it.
    payload: what `launch` returned (tokens, pending rewards, ...).
  """
  iteration: int
  policy_version: int
  payload: Any


def launch_horizon(it: int, staleness: int, num_steps: int, checkpoint_every: int) -> int:
  """Last iteration that may be launched while iteration `it` is current.

  At most `staleness` ahead, never past the run's end, and never past the
  next iteration that ends in a periodic checkpoint (drained there).
  """
  if staleness < 0 or checkpoint_every < 1 or not 0 <= it < num_steps:
    raise ValueError(f"bad pipeline bounds: it={it} staleness={staleness} "
                     f"num_steps={num_steps} checkpoint_every={checkpoint_every}")
  next_save = it + (-(it + 1)) % checkpoint_every  # smallest i >= it with (i+1) % every == 0
  return min(it + staleness, num_steps - 1, next_save)


class RolloutPipeline:
  """FIFO of launched rollouts with a staleness bound; see the module docstring."""

  def __init__(self, staleness: int, num_steps: int, checkpoint_every: int):
    if not isinstance(staleness, int) or staleness < 0:
      raise ValueError(f"rl.async_staleness must be an int >= 0, got {staleness!r}")
    self.staleness, self.num_steps, self.checkpoint_every = staleness, num_steps, checkpoint_every
    self._queue: collections.deque[InFlight] = collections.deque()

  def __len__(self) -> int:
    return len(self._queue)

  def fill(self, it: int, launch: Callable[[int], Any], version: Optional[int] = None):
    """Launches every iteration up to the horizon with the policy `launch` samples
    from: version `it` (the current one), or an older `version` (`rl.overlap_update`:
    the params from before the update still running, rl/overlap_update.py)."""
    version = it if version is None else version
    if not 0 <= version <= it:
      raise ValueError(f"policy version {version} at iteration {it}: must be in [0, {it}]")
    nxt = self._queue[-1].iteration + 1 if self._queue else it
    if self._queue and self._queue[0].iteration != it:
      raise RuntimeError(f"pipeline holds iteration {self._queue[0].iteration} at iteration {it}"
                         "; drain() after a rollback")
    for j in range(nxt, launch_horizon(it, self.staleness, self.num_steps,
                                       self.checkpoint_every) + 1):
      self._queue.append(InFlight(j, version, launch(j)))

  def pop(self, it: int) -> InFlight:
    """The rollout iteration `it` trains on (call `fill(it, ...)` first)."""
    if not self._queue or self._queue[0].iteration != it:
      raise RuntimeError(f"no rollout in flight for iteration {it}; call fill() first")
    return self._queue.popleft()

  def drain(self) -> int:
    """Drops everything in flight (rollback, shutdown); returns how many."""
    n = len(self._queue)
    self._queue.clear()
    return n

  def next(self, it: int, launch: Callable[[int], Any],
           version: Optional[int] = None) -> tuple[InFlight, dict]:
    """fill + pop; with `async/staleness` (policy versions between sampling
    and this update) and `async/in_flight` (rollouts launched ahead)."""
    self.fill(it, launch, version)
    entry = self.pop(it)
    return entry, {"async/staleness": float(it - entry.policy_version),
                   "async/in_flight": float(len(self._queue))}
