"""Dynamic filtering (DAPO's dynamic sampling): train only on informative groups.

A group whose G rewards are all equal has zero advantage everywhere, so it
adds no gradient, only noise in the loss normalisation. `collect` draws
rounds of B prompts (round 0 is the ordinary batch), keeps the groups with
unequal rewards, and draws further rounds, at most `max_rounds`, until B
informative groups are in hand. The batch size stays B x G (the compiled
step's shape): if the rounds run out, the missing groups are filled with
uninformative ones (zero advantage) and counted in `filtering/padded_groups`.
"""

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from rl_post.config_sections import check

Pick = tuple[int, int]  # (round, group)


@dataclasses.dataclass(frozen=True)
class FilterConfig:
  """The `filtering` section.

  Attributes:
    enabled: drop groups whose rewards are all equal and refill the batch.
    max_rounds: extra sampling rounds per step at most (each B prompts).
  """
  enabled: bool = False
  max_rounds: int = 2

  def __post_init__(self):
    check(self.max_rounds >= 0, "max_rounds", "must be >= 0", self.max_rounds)


def informative_groups(rewards_N: np.ndarray, group_size: int) -> np.ndarray:
  """bool per group: its rewards are not all equal (exact comparison)."""
  rewards_N = np.asarray(rewards_N)
  if rewards_N.ndim != 1 or group_size < 1 or rewards_N.shape[0] % group_size:
    raise ValueError(f"rewards of shape {rewards_N.shape} do not split into groups of "
                     f"{group_size}")
  r_MxG = rewards_N.reshape(-1, group_size)
  return r_MxG.max(axis=1) > r_MxG.min(axis=1)


def select_groups(informative: Sequence[np.ndarray], batch_size: int) -> tuple[list[Pick], int]:
  """The B groups to train on: informative ones first, in draw order.

  Returns:
    (picks, padded): padded = uninformative groups taken to fill the batch.
  """
  good = [(r, g) for r, mask in enumerate(informative) for g in np.flatnonzero(mask)]
  picks = good[:batch_size]
  if len(picks) < batch_size:
    rest = [(r, g) for r, mask in enumerate(informative) for g in np.flatnonzero(~mask)]
    picks += rest[:batch_size - len(picks)]
  if len(picks) < batch_size:
    raise ValueError(f"{len(picks)} groups drawn, fewer than the batch of {batch_size}")
  return [(int(r), int(g)) for r, g in picks], max(0, batch_size - len(good))


def gather(trees: Sequence[Any], picks: Sequence[Pick], group_size: int, num_rows: int) -> Any:
  """Rows of the picked groups from per-round trees, concatenated.

  Trees are nested dicts, dataclasses, lists/tuples of length N and arrays
  with leading dimension N (N = num_rows per round). Other leaves (scalar
  counters) are summed over rounds; None stays None. A dict key that only
  some rounds have (a reward component of a domain another round did not
  draw) must hold arrays of N rows; rounds without it count 0 there.
  """
  first = trees[0]
  if first is None:
    return None
  if dataclasses.is_dataclass(first) and not isinstance(first, type):
    return dataclasses.replace(first, **{
        f.name: gather([getattr(t, f.name) for t in trees], picks, group_size, num_rows)
        for f in dataclasses.fields(first) if f.init})
  if isinstance(first, dict):
    keys = list(dict.fromkeys(k for t in trees for k in t))
    return {k: gather(_with_zeros(trees, k, num_rows), picks, group_size, num_rows)
            for k in keys}
  rows = [(r, g * group_size + i) for r, g in picks for i in range(group_size)]
  if isinstance(first, (list, tuple)) and len(first) == num_rows:
    return type(first)(trees[r][i] for r, i in rows)
  if hasattr(first, "shape") and first.shape[:1] == (num_rows,):
    arrays = _right_padded([np.asarray(t) for t in trees])
    return np.stack([arrays[r][i] for r, i in rows]) if rows else arrays[0][:0]
  if isinstance(first, (int, float, np.number)):
    return type(first)(sum(trees))
  raise ValueError(f"cannot gather rows of a {type(first).__name__} leaf")


def _right_padded(arrays: list[np.ndarray]) -> list[np.ndarray]:
  """Arrays of equal rank padded with zeros at the end of every axis but the first."""
  if len({a.ndim for a in arrays}) > 1:
    raise ValueError(f"cannot gather rows of arrays of ranks {[a.ndim for a in arrays]}")
  shape = tuple(max(dims) for dims in zip(*(a.shape for a in arrays)))
  return [a if a.shape == shape else
          np.pad(a, [(0, 0)] + [(0, full - n) for full, n in zip(shape[1:], a.shape[1:])])
          for a in arrays]


def _with_zeros(trees: Sequence[dict], key, num_rows: int) -> list:
  """trees[i][key] per round, zeros of N rows for rounds without the key."""
  template = next(t[key] for t in trees if key in t)
  if any(key not in t for t in trees) and not (
      hasattr(template, "shape") and template.shape[:1] == (num_rows,)):
    raise ValueError(f"key {key!r} is missing from some rounds and is not an array of "
                     f"{num_rows} rows")
  return [t[key] if key in t else np.zeros_like(template) for t in trees]


def collect(draw: Callable[[int], Any], rewards_of: Callable[[Any], np.ndarray],
            batch_size: int, group_size: int, config: FilterConfig):
  """Draws rounds until B informative groups (or max_rounds extra rounds).

  Args:
    draw: round index -> one round's tree (B groups of G rows each).
    rewards_of: a round's tree -> its rewards_N.
  Returns:
    (batch, scored, metrics): the picked groups' rows; every scored row of
    every round (for pass-rate statistics and the curriculum); counters.
  """
  rounds, informative = [], []
  num_rows = batch_size * group_size
  while True:
    rounds.append(draw(len(rounds)))
    informative.append(informative_groups(rewards_of(rounds[-1]), group_size))
    if (not config.enabled or sum(int(m.sum()) for m in informative) >= batch_size
        or len(rounds) > config.max_rounds):
      break
  if not config.enabled:
    return rounds[0], rounds[0], {}
  picks, padded = select_groups(informative, batch_size)
  drawn = len(rounds) * batch_size
  every = [(r, g) for r in range(len(rounds)) for g in range(batch_size)]
  kept = sum(int(m.sum()) for m in informative)
  metrics = {"filtering/rounds": float(len(rounds)),
             "filtering/extra_prompts": float(drawn - batch_size),
             "filtering/dropped_groups": float(drawn - kept),
             "filtering/informative_frac": kept / drawn,
             "filtering/padded_groups": float(padded)}
  return (gather(rounds, picks, group_size, num_rows),
          gather(rounds, every, group_size, num_rows), metrics)
