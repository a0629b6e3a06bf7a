"""The zygote: a warm interpreter that forks one confined run per request.

Started by the host (inside bubblewrap in strict mode) as
``python -I -S zygote.py --mode strict|process --preload a,b,c``. It imports
the allowed modules once, then serves wire frames on its stdin/stdout: one
request in, one reply out, one run at a time. It holds nothing of value to a
candidate: no expected outputs, no secrets, an empty environment.

Per run it forks the runner (see runner.py) and supervises it from outside:
wall-clock deadline, output caps while streaming, and the kill.
"""

import gc
import importlib
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jail  # pylint: disable=g-import-not-at-top,wrong-import-position
import runner  # pylint: disable=g-import-not-at-top,wrong-import-position
import seccomp_bpf  # pylint: disable=g-import-not-at-top,wrong-import-position
import wire  # pylint: disable=g-import-not-at-top,wrong-import-position

_KILL_GRACE_S = 5.0


def _vm_size_bytes():
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmSize:"):
        return int(line.split()[1]) * 1024
  return 0


def _stdin_fd(data):
  if not data:
    return -1
  fd = os.memfd_create("stdin", 0)
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]
  os.lseek(fd, 0, os.SEEK_SET)
  return fd


class _Run:
  """Supervises one forked runner until every output pipe is closed."""

  def __init__(self, req, mode):
    self.req, self.mode = req, mode
    self.out = {"stdout": bytearray(), "stderr": bytearray()}
    self.timed_out = self.output_limit = False
    self.kill_target = None
    self.done = None
    self.error = None
    self.killed_at = None

  def kill(self):
    if self.killed_at is None:
      self.killed_at = time.monotonic()
    try:
      if self.kill_target is None:
        os.kill(self.runner_pid, signal.SIGKILL)
      elif self.kill_target[1]:
        os.killpg(self.kill_target[0], signal.SIGKILL)
      else:
        os.kill(self.kill_target[0], signal.SIGKILL)
    except OSError:
      pass

  def execute(self):
    t0 = time.monotonic()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    stdin_fd = _stdin_fd(self.req["stdin"])
    pid = os.fork()
    if pid == 0:
      runner.runner_main(self.req, stdin_fd, out_w, err_w, st_w)
    self.runner_pid = pid
    for fd in (out_w, err_w, st_w, stdin_fd):
      if fd >= 0:
        os.close(fd)
    self._supervise(t0, {out_r: "stdout", err_r: "stderr", st_r: "status"})
    _, status = os.waitpid(pid, 0)
    del status
    wall = time.monotonic() - t0
    reply = {"event": "result", "wall_s": wall,
             "stdout": bytes(self.out["stdout"]),
             "stderr": bytes(self.out["stderr"]),
             "timed_out": self.timed_out, "output_limit": self.output_limit,
             "error": self.error}
    if self.done is not None:
      reply.update(wait_status=self.done["wait_status"],
                   flag=self.done["flag"], files=self.done["files"],
                   files_omitted=self.done["files_omitted"])
    elif self.error is None and self.killed_at is None:
      reply["error"] = "runner exited without reporting"
    return reply

  def _supervise(self, t0, fds):
    cap = self.req["max_output_bytes"]
    deadline = t0 + self.req["timeout_s"]
    drain_s = 1.0 if self.mode == "strict" else 0.05
    drain_until = None
    status_reader = wire.FrameReader()
    poller = select.poll()
    for fd in fds:
      poller.register(fd, select.POLLIN)
    open_fds = set(fds)
    while open_fds:
      now = time.monotonic()
      if drain_until is not None:
        wait = drain_until - now
      elif self.killed_at is None:
        wait = deadline - now
        if wait <= 0:
          self.timed_out = True
          self.kill()
          continue
      else:
        wait = self.killed_at + _KILL_GRACE_S - now
      if wait <= 0:
        if drain_until is None:  # the runner ignores the kill: kill it too
          self.error = "runner did not finish after the kill"
          try:
            os.kill(self.runner_pid, signal.SIGKILL)
          except OSError:
            pass
        break
      for fd, _ in poller.poll(max(1, int(wait * 1000) + 1)):
        data = os.read(fd, 1 << 16)
        if not data:
          poller.unregister(fd)
          open_fds.discard(fd)
          if fds[fd] == "status" and drain_until is None:
            drain_until = time.monotonic() + drain_s
          continue
        name = fds[fd]
        if name == "status":
          status_reader.feed(data)
          while (msg := status_reader.pop()) is not None:
            self._on_status(msg)
          continue
        buf = self.out[name]
        room = cap - len(buf)
        buf += data[:max(room, 0)]
        if len(data) > room and not self.output_limit:
          self.output_limit = True
          self.kill()
    for fd in fds:
      os.close(fd)

  def _on_status(self, msg):
    event = msg.get("event")
    if event == "started":
      self.kill_target = (msg["kill_pid"], msg["kill_group"])
      if self.killed_at is not None:  # killed before it told us the pid
        self.kill()
    elif event == "done":
      self.done = msg
    elif event == "error":
      self.error = msg.get("message", "runner setup failed")
      sys.stderr.write(msg.get("trace", "") + "\n")


class _Args:
  mode = None
  preload = ""


def _parse_args(argv):
  """--mode strict|process [--preload a,b] (argparse costs fork time)."""
  args = _Args()
  it = iter(argv)
  for flag in it:
    if flag == "--mode":
      args.mode = next(it)
    elif flag == "--preload":
      args.preload = next(it)
    else:
      raise SystemExit(f"unknown flag {flag}")
  if args.mode not in ("strict", "process"):
    raise SystemExit("--mode must be strict or process")
  return args


def main():
  args = _parse_args(sys.argv[1:])
  chan_in, chan_out = os.dup(0), os.dup(1)
  devnull = os.open("/dev/null", os.O_RDWR)
  os.dup2(devnull, 0)
  os.dup2(devnull, 1)
  os.close(devnull)
  failed = []
  for name in filter(None, args.preload.split(",")):
    try:
      importlib.import_module(name)
    except Exception:  # pylint: disable=broad-except
      failed.append(name)
  seccomp_ok = seccomp_bpf.supported()
  if seccomp_ok:
    seccomp_bpf._PROGRAM = seccomp_bpf.build_filter()  # pylint: disable=protected-access
  if args.mode == "strict":
    jail.set_dumpable(False)
  gc.collect()
  gc.freeze()  # forked children do not copy-on-write the preloaded heap
  wire.write_frame(chan_out, {
      "event": "ready", "pid": os.getpid(), "mode": args.mode,
      "seccomp": seccomp_ok, "preload_failed": failed,
      "vm_size_bytes": _vm_size_bytes(), "uid": os.getuid()})
  while True:
    try:
      req = wire.read_frame(chan_in)
    except EOFError:
      return
    if req.get("op") == "ping":
      wire.write_frame(chan_out, {"event": "pong", "pid": os.getpid()})
      continue
    req["seccomp"] = req.get("seccomp", True) and seccomp_ok
    try:
      reply = _Run(req, args.mode).execute()
    except Exception as e:  # pylint: disable=broad-except
      reply = {"event": "result", "error": f"zygote: {type(e).__name__}: {e}"}
    wire.write_frame(chan_out, reply)


if __name__ == "__main__":
  main()
