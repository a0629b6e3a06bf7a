"""Adaptive per-domain difficulty: a window of levels that moves with the pass rate.

Each domain has an ordered list of difficulty levels. The curriculum keeps,
per domain, the index of the easiest active level; `width` consecutive
levels from there are active (sampled with the mixture's difficulty ratios).
After every step it records the domain's pass/fail outcomes; once the last
`window` outcomes are in and their pass rate leaves the band [low, high],
the active levels move one level harder (above `high`) or easier (below
`low`) and the record starts afresh. Moves depend only on the outcomes fed
in, so a run is deterministic for a seed, and `state_dict` /
`load_state_dict` carry the state through checkpoints.
"""

import collections
import dataclasses
from typing import Iterable, Mapping, Sequence

from rl_post.config_sections import check

STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
  """The `tasks.curriculum` section.

  Attributes:
    enabled: move difficulty with the pass rate (False: all levels active).
    low, high: the pass-rate band; below low -> easier, above high -> harder.
    window: outcomes per decision (the most recent ones since the last move).
    width: number of consecutive levels active at a time.
    start: index (into a domain's levels, 0 = easiest) of the first active level;
      clamped to the domain's range.
  """
  enabled: bool = False
  low: float = 0.2
  high: float = 0.8
  window: int = 64
  width: int = 2
  start: int = 0

  def __post_init__(self):
    check(0.0 <= self.low <= 1.0, "low", "must be in [0, 1]", self.low)
    check(self.low < self.high <= 1.0, "high", f"must be in (low, 1] (low={self.low})",
          self.high)
    check(self.window >= 1, "window", "must be >= 1", self.window)
    check(self.width >= 1, "width", "must be >= 1", self.width)
    check(self.start >= 0, "start", "must be >= 0", self.start)


class Curriculum:
  """Per-domain active level windows, moved by recent pass rates."""

  def __init__(self, config: CurriculumConfig, levels: Mapping[str, Sequence[int]]):
    self.config = config
    self.levels = {d: tuple(v) for d, v in levels.items()}
    self._index = {d: self._clamp(d, config.start) for d in self.levels}
    self._history = {d: collections.deque(maxlen=config.window) for d in self.levels}
    self.moves = {d: 0 for d in self.levels}

  def _width(self, domain: str) -> int:
    n = len(self.levels[domain])
    return n if not self.config.enabled else min(self.config.width, n)

  def _clamp(self, domain: str, index: int) -> int:
    return max(0, min(index, len(self.levels[domain]) - self._width(domain)))

  def active_levels(self, domain: str) -> tuple[int, ...]:
    """The levels drawn from now, easiest first."""
    i = self._index[domain]
    return self.levels[domain][i:i + self._width(domain)]

  def pass_rate(self, domain: str) -> float | None:
    """Pass rate of the outcomes recorded since the last move (None if none)."""
    h = self._history[domain]
    return sum(h) / len(h) if h else None

  def update(self, domains: Iterable[str], passed: Iterable[bool]) -> list[str]:
    """Records outcomes (one per completion) and moves domains out of the band.

    Returns:
      the domains whose active levels moved, in first-seen order.
    """
    if not self.config.enabled:
      return []
    touched = []
    for domain, ok in zip(domains, passed, strict=True):
      if domain not in self._history:
        raise ValueError(f"curriculum: outcome for unknown domain {domain!r}; "
                         f"known: {sorted(self._history)}")
      self._history[domain].append(int(bool(ok)))
      if domain not in touched:
        touched.append(domain)
    return [d for d in touched if self._maybe_move(d)]

  def _maybe_move(self, domain: str) -> bool:
    h = self._history[domain]
    if len(h) < self.config.window:
      return False
    rate = sum(h) / len(h)
    step = 1 if rate > self.config.high else -1 if rate < self.config.low else 0
    new = self._clamp(domain, self._index[domain] + step)
    if new == self._index[domain]:
      return False
    self._index[domain] = new
    self.moves[domain] += 1
    h.clear()
    return True

  def state_dict(self) -> dict:
    """JSON-serialisable state (for the checkpoint's `extra`)."""
    return {"version": STATE_VERSION,
            "domains": {d: {"index": self._index[d], "history": list(self._history[d]),
                            "moves": self.moves[d]} for d in sorted(self.levels)}}

  def load_state_dict(self, state: Mapping) -> None:
    """Restores `state_dict()` output; raises ValueError on a mismatching state."""
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
      raise ValueError(f"curriculum state must be a dict with version {STATE_VERSION}, "
                       f"got {state!r:.200}")
    stored = state["domains"]
    if set(stored) != set(self.levels):
      raise ValueError(f"curriculum state is for domains {sorted(stored)} but the config has "
                       f"{sorted(self.levels)}")
    for d, s in stored.items():
      index, history = s["index"], s["history"]
      if not (isinstance(index, int) and 0 <= index == self._clamp(d, index)):
        raise ValueError(f"curriculum state: index {index!r} of domain {d!r} is out of range "
                         f"for its levels {self.levels[d]} and width {self._width(d)}")
      if len(history) > self.config.window or any(v not in (0, 1) for v in history):
        raise ValueError(f"curriculum state: history of domain {d!r} must hold at most "
                         f"{self.config.window} outcomes of 0/1, got {history!r:.200}")
    for d, s in stored.items():
      self._index[d] = s["index"]
      self._history[d] = collections.deque(s["history"], maxlen=self.config.window)
      self.moves[d] = int(s.get("moves", 0))
