"""What orbax leaves behind when a restore fails part-way, released before it can report.

When one array's read fails (e.g. a truncated data file), orbax closes its
event loop with its other reads in flight. Left alone, they report later as
unraisable exceptions and "never awaited" warnings, at whatever point of the
run the garbage collector reaches them (in CI: in some later test), far from
the corrupt step they are about, which `CheckpointManager` already reports.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import types
import warnings
from typing import Any

_RELEASE_WAIT_S = 5.0  # how long a failed restore waits for orbax's reads still in flight


def _orbax_coroutine(obj: Any) -> bool:
  # type(), not isinstance(): the latter reads __class__, which some modules' lazy
  # attributes answer with a deprecation warning
  return type(obj) is types.CoroutineType and f"{os.sep}orbax{os.sep}" in obj.cr_code.co_filename


class OrbaxReadLeftovers:
  """While an orbax restore runs: drops the unraisable exceptions its failed reads leave.

  When one array's read fails (e.g. a truncated data file), orbax closes its event
  loop with the other reads in flight: their tensorstore callbacks then fail on
  the closed loop ("Event loop is closed", from asyncio's call_soon_threadsafe),
  and their coroutines raise as they are finalised ("Exception ignored in:
  <coroutine _read_array_index_and_device_put>"). The step is reported as
  corrupt instead. Every other unraisable exception goes to the previous hook.
  """

  def __enter__(self):
    self.previous = sys.unraisablehook
    sys.unraisablehook = self._hook
    return self

  def _hook(self, unraisable) -> None:
    closed_loop = (isinstance(unraisable.exc_value, RuntimeError)
                   and str(unraisable.exc_value) == "Event loop is closed")
    if not (closed_loop or _orbax_coroutine(unraisable.object)):
      self.previous(unraisable)

  def __exit__(self, *exc) -> None:
    sys.unraisablehook = self.previous


def release_failed_read(error: BaseException) -> None:
  """Frees and finalises, now, what orbax abandons when a read fails part-way.

  Its other reads stay referenced from orbax's tasks and from the frames of
  `error`'s traceback chain. Left to the garbage collector, they would report
  (see OrbaxReadLeftovers; also "coroutine ... was never awaited" warnings) at
  some later point of the run, far from the step they are about. So the
  chain's tracebacks are dropped (its exceptions and messages stay) and this
  waits, up to _RELEASE_WAIT_S, until no orbax coroutine is left. Call it
  inside OrbaxReadLeftovers.
  """
  seen, pending = set(), [error]
  while pending:
    e = pending.pop()
    if e is None or id(e) in seen:
      continue
    seen.add(id(e))
    e.__traceback__ = None
    pending += [e.__cause__, e.__context__]
  deadline = time.monotonic() + _RELEASE_WAIT_S
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"coroutine '.*' was never awaited",
                            category=RuntimeWarning)
    while True:
      gc.collect()
      if (not any(_orbax_coroutine(o) for o in gc.get_objects())
          or time.monotonic() > deadline):
        return
      time.sleep(0.02)
