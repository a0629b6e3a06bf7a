"""The zygote: a warm interpreter that forks one confined run per request.

Started by the host (inside bubblewrap in strict mode) as
``python -I -S zygote.py --mode strict|process --preload a,b,c ...``. It
imports the allowed modules once, then serves the channel on its
stdin/stdout, one run at a time. In strict mode it always keeps one runner
prepared ahead (cloned into fresh namespaces, filesystems mounted, the
candidate forked and confined as far as the request allows; see runner.py),
so a request only has to be handed over. For each request it reads a small
binary header (limits only) and passes it to the prepared runner; the
candidate reads the payload (code, stdin, files) from the channel itself
and the runner writes the reply. While that run executes, the zygote
prepares the next runner. The zygote never holds a candidate's code,
inputs or outputs, no expected values, no secrets and an empty environment,
so nothing in it is of use to a later run forked from it.
"""

import gc
import importlib
import os
import select
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jail  # pylint: disable=g-import-not-at-top,wrong-import-position
import runner  # pylint: disable=g-import-not-at-top,wrong-import-position
import seccomp_bpf  # pylint: disable=g-import-not-at-top,wrong-import-position
import wire  # pylint: disable=g-import-not-at-top,wrong-import-position

# Backstop on top of the runner's own deadline (it kills the run itself).
_RUNNER_GRACE_S = 8.0
# A prepared runner takes a header at once; this only bounds a hung one.
_TAKEN_TIMEOUT_S = 10.0
_FLAGS = {"--mode": "mode", "--preload": "preload", "--work-mb": "work_mb",
          "--tmp-mb": "tmp_mb", "--tmp-root": "tmp_root"}


def _vm_size_bytes():
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmSize:"):
        return int(line.split()[1]) * 1024
  return 0


def _parse_args(argv):
  """--mode strict|process [--preload a,b] [--work-mb N] [--tmp-mb N]
  [--tmp-root DIR] (no argparse: less to fork)."""
  args = {"mode": None, "preload": "", "work_mb": "64", "tmp_mb": "64",
          "tmp_root": "/tmp"}
  it = iter(argv)
  for flag in it:
    if flag not in _FLAGS:
      raise SystemExit(f"unknown flag {flag}")
    args[_FLAGS[flag]] = next(it)
  if args["mode"] not in ("strict", "process"):
    raise SystemExit("--mode must be strict or process")
  args["work_mb"], args["tmp_mb"] = int(args["work_mb"]), int(args["tmp_mb"])
  return args


class _Runner:
  """The zygote's handle on one runner process."""

  def __init__(self, pid, go_w, done_r):
    self.pid = pid
    self.pidfd = os.pidfd_open(pid)
    self.go_w = go_w
    self.done_r = done_r

  def close(self):
    for fd in (self.go_w, self.done_r):
      if fd is not None:
        os.close(fd)
    self.go_w = self.done_r = None

  def kill(self):
    try:
      signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
    except OSError:
      pass


class Zygote:
  """Starts runners, hands them requests, reaps them."""

  def __init__(self, ctx, chan_in, chan_out):
    self.ctx = ctx
    self.chan_in = chan_in
    self.chan_out = chan_out
    self.prepared = None
    self.exiting = []  # runners that replied and are on their way out

  def start_runner(self):
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    try:
      if self.ctx["mode"] == "strict":
        pid = jail.clone_into_run_namespaces()
      else:
        pid = os.fork()
    except OSError:
      for fd in (go_r, go_w, done_r, done_w):
        os.close(fd)
      raise
    if pid == 0:
      runner.runner_main(self.ctx, go_r, self.chan_in, self.chan_out, done_w)
    os.close(go_r)
    os.close(done_w)
    os.set_blocking(done_r, False)  # read only after poll says it is ready
    return _Runner(pid, go_w, done_r)

  def prepare_next(self):
    """Strict mode: the next run's runner, prepared while this one runs."""
    if self.ctx["mode"] == "strict" and self.prepared is None:
      try:
        self.prepared = self.start_runner()
      except OSError as e:
        sys.stderr.write(f"zygote: cannot prepare a runner: {e}\n")

  def _hand_over(self, raw_header):
    """Gives the run header to a live runner; returns it, or None.

    A runner that died before taking the header (say, killed for memory
    while it waited) has not touched the payload: another one takes it.
    """
    for _ in range(3):
      r, self.prepared = self.prepared, None
      if r is None:
        r = self.start_runner()
      try:
        os.write(r.go_w, raw_header)  # a few bytes: one atomic pipe write
        if self._wait_byte(r, _TAKEN_TIMEOUT_S) == runner.TAKEN:
          return r
      except OSError:
        pass
      r.kill()
      self._retire(r)
    return None

  def _wait_byte(self, r, timeout_s):
    """The runner's next status byte, or None if it died or stayed silent."""
    poller = select.poll()
    poller.register(r.done_r, select.POLLIN)
    poller.register(r.pidfd, select.POLLIN)
    if not poller.poll(int(timeout_s * 1000)):
      return None
    try:
      return os.read(r.done_r, 1)
    except OSError:
      return None

  def serve(self, raw_header, header):
    """One request; False if the channel is now unusable."""
    try:
      r = self._hand_over(raw_header)
    except OSError as e:
      r, error = None, f"zygote: {e}"
    else:
      error = "zygote: no runner would take the request"
    if r is None:
      # The payload is still in the channel and nobody will read it.
      wire.write_frame(self.chan_out, {"event": "result", "error": error,
                                       "wall_s": 0.0})
      return False
    os.close(r.go_w)
    r.go_w = None
    if header["prepare_ahead"]:
      self.prepare_next()
    done = self._await_reply(r, header["timeout_s"] + _RUNNER_GRACE_S)
    self._retire(r)
    return done

  def _await_reply(self, r, timeout_s):
    """True once the runner announced its full reply (the channel is ours)."""
    if self._wait_byte(r, timeout_s) == runner.DONE:
      return True
    r.kill()  # strict: pid 1, so the whole run dies
    return False

  def _retire(self, r):
    r.close()
    self.exiting.append(r)
    self.reap()

  def reap(self):
    """Reaps the runners that have exited since."""
    still = []
    for r in self.exiting:
      try:
        pid, _ = os.waitpid(r.pid, os.WNOHANG)
      except ChildProcessError:
        pid = r.pid
      if pid == 0:
        still.append(r)
      else:
        os.close(r.pidfd)
    self.exiting = still


def main():
  args = _parse_args(sys.argv[1:])
  chan_in, chan_out = os.dup(0), os.dup(1)
  devnull = os.open("/dev/null", os.O_RDWR)
  os.dup2(devnull, 0)
  os.dup2(devnull, 1)
  os.close(devnull)
  failed = []
  for name in filter(None, args["preload"].split(",")):
    try:
      importlib.import_module(name)
    except Exception:  # pylint: disable=broad-except
      failed.append(name)
  seccomp_ok = seccomp_bpf.supported()
  if seccomp_ok:
    seccomp_bpf._PROGRAM = seccomp_bpf.build_filter()  # pylint: disable=protected-access
  if args["mode"] == "strict":
    jail.set_dumpable(False)
    # Every strict run sees the same environment (HOME is its /work), so it
    # is set here once instead of in every candidate.
    jail.clean_environment(jail.WORK_DIR)
  gc.collect()
  gc.freeze()  # forked children do not copy-on-write the preloaded heap
  wire.write_frame(chan_out, {
      "event": "ready", "pid": os.getpid(), "mode": args["mode"],
      "seccomp": seccomp_ok, "preload_failed": failed,
      "vm_size_bytes": _vm_size_bytes(), "uid": os.getuid()})
  ctx = {"mode": args["mode"], "seccomp": seccomp_ok,
         "outer_ids": [os.getuid(), os.getgid()], "work_mb": args["work_mb"],
         "tmp_mb": args["tmp_mb"], "tmp_root": args["tmp_root"]}
  zygote = Zygote(ctx, chan_in, chan_out)
  zygote.prepare_next()
  while True:
    try:
      raw, header = wire.read_run_header(chan_in)
    except EOFError:
      return
    if not zygote.serve(raw, header):
      sys.stderr.write("runner failed mid-protocol; exiting\n")
      return


if __name__ == "__main__":
  main()
