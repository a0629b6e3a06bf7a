"""The zygote: a warm interpreter that forks one confined run per request.

Started by the host (inside bubblewrap in strict mode) as
``python -I -S zygote.py --mode strict|process --preload a,b,c``. It imports
the allowed modules once, then serves the channel on its stdin/stdout, one
run at a time: it reads a small header frame (limits only) and forks the
runner, which reads the payload (code, stdin, files) itself, runs it and
writes the reply (see runner.py). The zygote never holds a candidate's code,
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
_MAX_HEADER_BYTES = 64 * 1024


def _vm_size_bytes():
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmSize:"):
        return int(line.split()[1]) * 1024
  return 0


def _parse_args(argv):
  """--mode strict|process [--preload a,b] (no argparse: less to fork)."""
  args = {"mode": None, "preload": ""}
  it = iter(argv)
  for flag in it:
    if flag not in ("--mode", "--preload"):
      raise SystemExit(f"unknown flag {flag}")
    args[flag[2:]] = next(it)
  if args["mode"] not in ("strict", "process"):
    raise SystemExit("--mode must be strict or process")
  return args


def serve_one(header, chan_in, chan_out):
  """Forks the runner for one request; False if the channel is now unusable.

  The runner writes one byte on `done` after its reply frame, so how it died
  afterwards (the host may sweep it away in process mode) does not matter.
  """
  done_r, done_w = os.pipe()
  try:
    if header["mode"] == "strict":
      header["outer_ids"] = [os.getuid(), os.getgid()]
      pid = jail.clone_into_run_namespaces()
    else:
      pid = os.fork()
  except OSError as e:
    os.close(done_r)
    os.close(done_w)
    wire.read_frame(chan_in)  # the unread payload: keep the channel in step
    wire.write_frame(chan_out, {"event": "result",
                                "error": f"zygote: {e}", "wall_s": 0.0})
    return True
  if pid == 0:
    os.close(done_r)
    runner.runner_main(header, chan_in, chan_out, done_w)
  os.close(done_w)
  pidfd = os.pidfd_open(pid)
  poller = select.poll()
  poller.register(pidfd, select.POLLIN)
  if not poller.poll(int((header["timeout_s"] + _RUNNER_GRACE_S) * 1000)):
    os.kill(pid, signal.SIGKILL)  # strict: pid 1, so the whole run dies
  os.close(pidfd)
  os.waitpid(pid, 0)
  os.set_blocking(done_r, False)
  try:
    done = os.read(done_r, 1) == b"1"
  except OSError:
    done = False
  os.close(done_r)
  return done


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
  gc.collect()
  gc.freeze()  # forked children do not copy-on-write the preloaded heap
  wire.write_frame(chan_out, {
      "event": "ready", "pid": os.getpid(), "mode": args["mode"],
      "seccomp": seccomp_ok, "preload_failed": failed,
      "vm_size_bytes": _vm_size_bytes(), "uid": os.getuid()})
  while True:
    try:
      header = wire.read_frame(chan_in, max_bytes=_MAX_HEADER_BYTES)
    except EOFError:
      return
    if header.get("op") == "ping":
      wire.write_frame(chan_out, {"event": "pong", "pid": os.getpid()})
      continue
    header["mode"] = args["mode"]
    header["seccomp"] = bool(header.get("seccomp", True)) and seccomp_ok
    if not serve_one(header, chan_in, chan_out):
      sys.stderr.write("runner failed mid-protocol; exiting\n")
      return


if __name__ == "__main__":
  main()
