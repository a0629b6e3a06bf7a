"""Watching one run from outside it: deadline, output caps, the kill.

Runs in the runner R (outside the run's pid namespace). Reads stdout and
stderr as they stream, never keeping more than the cap, and follows the
run's top process through a pidfd. On the deadline or an output overflow it
SIGKILLs the top process: in strict mode that is the namespace's init, whose
death takes every process of the run with it.
"""

import os
import select
import signal
import time

_KILL_GRACE_S = 5.0


class Outcome:
  """What the supervisor saw."""

  def __init__(self):
    self.out = {"stdout": bytearray(), "stderr": bytearray()}
    self.timed_out = False
    self.output_limit = False
    self.error = None
    self.setup_error = ""


def watch(top_pid, kill_group, out_r, err_r, deadline, cap, drain_s):
  """Supervises until the top process exited and the pipes are drained.

  Args:
    top_pid: the run's top process (init in strict mode, the candidate in
      process mode); a child of the caller.
    kill_group: SIGKILL the process group `top_pid` instead of the process.
    out_r, err_r: read ends of the candidate's stdout / stderr.
    deadline: time.monotonic() value of the wall-clock limit.
    cap: max bytes kept per stream; more kills the run.
    drain_s: how long to keep reading after the top process exited.

  Returns:
    an Outcome. The caller reaps `top_pid`.
  """
  res = Outcome()
  pidfd = os.pidfd_open(top_pid)
  names = {out_r: "stdout", err_r: "stderr", pidfd: "exit"}
  poller = select.poll()
  for fd in names:
    poller.register(fd, select.POLLIN)
  open_pipes = {out_r, err_r}
  killed_at = None
  drain_until = None

  def kill():
    nonlocal killed_at
    if killed_at is None:
      killed_at = time.monotonic()
    try:
      if kill_group:
        os.killpg(top_pid, signal.SIGKILL)
      else:
        os.kill(top_pid, signal.SIGKILL)
    except OSError:
      pass

  try:
    while open_pipes or drain_until is None:
      now = time.monotonic()
      if drain_until is not None:
        wait = drain_until - now
        if wait <= 0:
          break
      elif killed_at is None:
        wait = deadline - now
        if wait <= 0:
          res.timed_out = True
          kill()
          continue
      else:
        wait = killed_at + _KILL_GRACE_S - now
        if wait <= 0:
          res.error = "run did not end after SIGKILL"
          break
      for fd, _ in poller.poll(max(1, int(wait * 1000) + 1)):
        name = names[fd]
        if name == "exit":
          poller.unregister(fd)
          drain_until = time.monotonic() + drain_s
          continue
        data = os.read(fd, 1 << 16)
        if not data:
          poller.unregister(fd)
          open_pipes.discard(fd)
          continue
        buf = res.out[name]
        room = cap - len(buf)
        buf += data[:max(room, 0)]
        if len(data) > room and not res.output_limit:
          res.output_limit = True
          kill()
  finally:
    os.close(pidfd)
  return res
