"""Watching one run: deadline, output caps, the kill.

Runs in the run's pid 1 (strict mode: no signal from inside the namespace
reaches it, and it is non-dumpable) or in the runner (process mode). Reads
stdout and stderr as they stream, never keeping more than the cap, and
follows the candidate's main process through a pidfd. On the deadline or an
output overflow it kills the whole run.
"""

import os
import select
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


def watch(top_pid, kill, out_r, err_r, deadline, cap, drain_s):
  """Supervises until the top process exited and the pipes are drained.

  Args:
    top_pid: the candidate's main process, a child of the caller.
    kill: SIGKILLs the whole run (the namespace, or the process group); it
      is called on the deadline, on an output overflow, and as soon as the
      top process has exited (so orphans cannot hold the pipes open).
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

  def kill_run():
    nonlocal killed_at
    if killed_at is None:
      killed_at = time.monotonic()
    kill()

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
          kill_run()
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
          kill()  # orphans and daemons go now; the status is already set
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
          kill_run()
  finally:
    os.close(pidfd)
  return res
