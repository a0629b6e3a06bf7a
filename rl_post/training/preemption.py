"""SIGTERM (preemption) as a request to checkpoint and exit cleanly.

  with SigtermFlag() as preempt:
    for step in ...:
      ...
      if preempt.requested:
        save a checkpoint; break

Outside the main thread (where Python cannot install signal handlers) the
flag is inert and SIGTERM keeps its previous behaviour.
"""

from __future__ import annotations

import signal
import threading

from absl import logging


class SigtermFlag:
  """While entered, SIGTERM sets `requested` instead of killing the process."""

  def __init__(self):
    self.requested = False
    self._previous = None

  def _handle(self, signum, frame):
    del frame
    if not self.requested:
      logging.warning("signal %d received: will checkpoint and exit after this step", signum)
    self.requested = True

  def __enter__(self) -> SigtermFlag:
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
      self._previous = None
