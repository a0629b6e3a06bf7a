"""Programs JAX builds in this process, counted and timed (`jax.monitoring`).

A jitted function traces, lowers and compiles once per new combination of
shapes, dtypes and static arguments; a loop whose shapes stay put builds
nothing after its first step. `CompileClock` lets a loop report how many
programs each step built and the seconds spent building them
(`time/compile_s`), apart from the seconds spent running them, and lets a
test count programs across steps instead of timing them.

One listener per process is registered on first use (JAX offers no way to
remove one); clocks read its running totals, so any number of clocks may
exist and each sees only what happened since it was made or last read.
"""

from __future__ import annotations

import dataclasses
import threading

import jax

# one event per program lowered (whether XLA then compiles it or loads it
# from the persistent compilation cache)
_LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_BUILD_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", _LOWERED,
                 "/jax/core/compile/backend_compile_duration",
                 "/jax/compilation_cache/cache_retrieval_time_sec")


@dataclasses.dataclass
class _Totals:
  programs: int = 0
  seconds: float = 0.0


_totals = _Totals()
_lock = threading.Lock()
_registered = False


def _on_duration(event: str, duration_secs: float, **kwargs) -> None:
  del kwargs
  if event not in _BUILD_EVENTS:
    return
  with _lock:
    _totals.seconds += float(duration_secs)
    if event == _LOWERED:
      _totals.programs += 1


def _register() -> None:
  global _registered
  with _lock:
    if _registered:
      return
    _registered = True
  jax.monitoring.register_event_duration_secs_listener(_on_duration)


def totals() -> tuple[int, float]:
  """(programs built, seconds spent building them) in this process since the
  first clock was made."""
  _register()
  with _lock:
    return _totals.programs, _totals.seconds


class CompileClock:
  """Programs built and build seconds since the last `take()` (or creation).

    clock = CompileClock()
    ... one step ...
    programs, seconds = clock.take()
  Tracing, lowering, XLA compilation and persistent-cache loads all count
  as build time.
  """

  def __init__(self):
    self._last = totals()

  def peek(self) -> tuple[int, float]:
    """(programs, seconds) since the last take, without resetting."""
    programs, seconds = totals()
    return programs - self._last[0], seconds - self._last[1]

  def take(self) -> tuple[int, float]:
    """(programs, seconds) since the last take; starts a new interval."""
    now = totals()
    out = now[0] - self._last[0], now[1] - self._last[1]
    self._last = now
    return out

  def seconds(self) -> float:
    """Build seconds since the last take (for callers that want only the seconds)."""
    return self.peek()[1]
