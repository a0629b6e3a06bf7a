"""Wall-clock timers and latency percentiles as metric dicts."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np


class StepTimer:
  """Named wall-clock timers that become `time/<name>_s` metrics.

  Usage, once per step:
    timer = StepTimer()
    with timer("rollout"):
      ...
    with timer("train"):
      ...
    metrics.update(timer.metrics())   # {"time/rollout_s": .., "time/train_s": ..}
    timer.reset()

  Timing the same name twice in one step adds the durations. Different names
  may nest (e.g. "step" around "rollout"). Time what the host waits for:
  JAX dispatch is async, so block on results inside the timed block.

  With a `compile_clock` (`rl_post.metrics.compiles.CompileClock`), the
  seconds spent building programs inside each block are reported apart:
  `time/<name>_compile_s` for a block that built any, and over the
  outermost blocks `time/compile_s` and `compile/programs` (the block's
  own `time/<name>_s` still includes them).
  """

  def __init__(self, clock: Callable[[], float] = time.perf_counter, compile_clock=None):
    """Args: clock: monotonic seconds; injectable for tests. compile_clock: an
    object with `peek() -> (programs, seconds)`, or None."""
    self._clock = clock
    self._compile_clock = compile_clock
    self._totals_s: dict[str, float] = {}
    self._compile_s: dict[str, float] = {}
    self._programs = 0
    self._outer_compile_s = 0.0
    self._running: set[str] = set()

  @contextlib.contextmanager
  def __call__(self, name: str) -> Iterator[None]:
    if not isinstance(name, str) or not name or "/" in name or " " in name:
      raise ValueError(
          f"timer name must be a non-empty string without '/' or spaces, "
          f"got {name!r}")
    if name in self._running:
      raise ValueError(f"timer {name!r} is already running (nested reuse)")
    outermost = not self._running
    self._running.add(name)
    built = self._compile_clock.peek() if self._compile_clock is not None else None
    start = self._clock()
    try:
      yield
    finally:
      self._running.discard(name)
      self._totals_s[name] = self._totals_s.get(name, 0.0) + (
          self._clock() - start)
      if built is not None:
        programs, seconds = (b - a for a, b in zip(built, self._compile_clock.peek()))
        if programs or seconds:
          self._compile_s[name] = self._compile_s.get(name, 0.0) + seconds
        if outermost:
          self._programs += programs
          self._outer_compile_s += seconds

  def metrics(self) -> dict[str, float]:
    """Returns {"time/<name>_s": seconds} for timers finished since reset
    (and the compile metrics of the class docstring, with a compile clock)."""
    out = {f"time/{name}_s": t for name, t in self._totals_s.items()}
    if self._compile_clock is not None:
      out.update({f"time/{name}_compile_s": t for name, t in self._compile_s.items()})
      out["time/compile_s"] = self._outer_compile_s
      out["compile/programs"] = float(self._programs)
    return out

  def reset(self) -> None:
    """Clears finished totals; call once per step after `metrics()`."""
    self._totals_s.clear()
    self._compile_s.clear()
    self._programs, self._outer_compile_s = 0, 0.0


def percentiles(values: Sequence[float] | np.ndarray,
                qs: Sequence[float] = (50, 99), *,
                prefix: str = "") -> dict[str, float]:
  """Percentiles of durations, keyed for metrics.

  Args:
    values: durations in seconds (any 1-D sequence, at least one value).
    qs: percentiles in [0, 100].
    prefix: prepended to each key, e.g. "sandbox/latency_" gives
      "sandbox/latency_p50_s".

  Returns:
    {f"{prefix}p{q}_s": value} for each q (q printed without a trailing .0,
    so 99.9 gives "p99.9").
  """
  values_N = np.asarray(values, dtype=np.float64)
  if values_N.ndim != 1:
    raise ValueError(f"values must be 1-D, got shape {values_N.shape}")
  if values_N.size == 0:
    raise ValueError("values is empty: no durations to take percentiles of")
  if not np.isfinite(values_N).all():
    raise ValueError("values contains NaN or inf")
  qs = tuple(qs)
  if not qs:
    raise ValueError("qs is empty")
  for q in qs:
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not (
        0 <= q <= 100) or math.isnan(q):
      raise ValueError(f"each q must be a number in [0, 100], got {q!r}")
  out_Q = np.percentile(values_N, qs)
  return {f"{prefix}p{q:g}_s": float(v) for q, v in zip(qs, out_Q)}
