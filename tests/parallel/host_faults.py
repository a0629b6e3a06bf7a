"""Multi-process test helpers: a free coordinator port, and one host dying mid-run."""

import os
import signal
import socket
import time


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def kill_one_host_after(marker, pair) -> None:
  """Waits until `marker` exists, then SIGKILLs `pair[1]` and ends its peer `pair[0]`.

  The peer would fail or block in a collective without its partner; a
  scheduler ends such a job, so the test does too.
  """
  deadline = time.time() + 600
  while not os.path.exists(marker) and time.time() < deadline and pair[1].poll() is None:
    time.sleep(0.05)
  assert pair[1].poll() is None, pair[1].communicate()[0][-3000:]
  os.kill(pair[1].pid, signal.SIGKILL)  # one host dies mid-run
  assert pair[1].wait() == -signal.SIGKILL
  pair[0].kill()
  pair[0].wait()
