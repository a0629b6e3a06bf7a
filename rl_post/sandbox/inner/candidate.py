"""The candidate process D (stdlib only): confine, wait, run.

Forked by the runner R (runner.py) before its request exists, D confines
itself as far as it can without the request (own session, work dir,
no-new-privs; in strict mode R has already dropped every capability) and
waits for R's go byte. Then it reads the payload frame (code, stdin, files,
limits) from the channel itself, writes the input files, applies the
limits and the seccomp filter, and runs the code (harness.py). Until the
code runs, a failure is reported on the setup pipe as a sandbox failure;
from then on nothing the candidate does can claim one.
"""

import fcntl
import os

import harness
import jail
import seccomp_bpf
import wire

FLAG_FD = 3  # the candidate may write "M" (MemoryError) here; only a failure
SETUP_FD = 4  # setup errors; closed before any candidate code runs
# D writes this on the setup pipe once the payload frame is read in full:
# without it the channel is out of step and the worker must be replaced.
PAYLOAD_READ = b"P"


def write_input_files(root, files):
  for name, data in files.items():
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root.rstrip("/") + "/"):
      raise ValueError(f"input file name escapes the work dir: {name!r}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                 0o644)
    with os.fdopen(fd, "wb") as f:
      f.write(data)


def _install_fds(targets):
  """dup2 each source fd onto its target without clobbering another source."""
  high = {dst: fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 64)
          for dst, src in targets.items()}
  for dst, src in high.items():
    os.dup2(src, dst)  # dup2 clears close-on-exec on the target
    os.close(src)


def _stdin_fd(data):
  if not data:
    return os.open("/dev/null", os.O_RDONLY)
  fd = os.memfd_create("stdin", 0)
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]
  os.lseek(fd, 0, os.SEEK_SET)
  return fd


def candidate_main(ctx, fds, work_dir):
  """D: confine, wait for the request, read it, run it. Never returns.

  Args:
    ctx: the zygote's settings (mode, seccomp).
    fds: go (header from R), chan_in (payload), out, err, flag, setup.
    work_dir: the run's work dir.
  """
  setup_fd = fds["setup"]
  try:
    jail.set_name("sb-candidate")
    os.setsid()
    os.chdir(work_dir)
    if ctx["mode"] != "strict":  # strict: the zygote set it up once
      jail.clean_environment(work_dir)
    jail.set_no_new_privs()
    if os.read(fds["go"], 1) != b"1":
      os._exit(0)  # abandoned before a request came (worker shutting down)
    payload = wire.read_frame(fds["chan_in"])
    os.write(setup_fd, PAYLOAD_READ)
    write_input_files(work_dir, payload["files"])
    _install_fds({0: _stdin_fd(payload["stdin"]), 1: fds["out"],
                  2: fds["err"], FLAG_FD: fds["flag"], SETUP_FD: setup_fd})
    setup_fd = SETUP_FD
    jail.close_fds_except([0, 1, 2, FLAG_FD, SETUP_FD])
    jail.raise_oom_score()
    jail.set_limits(payload["limits"])
    if ctx["seccomp"] and payload["seccomp"]:
      seccomp_bpf.install(jail.libc)
    # From here on nothing the candidate does can claim a sandbox failure.
    os.close(SETUP_FD)
  except BaseException as e:  # pylint: disable=broad-except
    try:
      os.write(setup_fd, f"{type(e).__name__}: {e}".encode())
    finally:
      os._exit(126)
  harness.run(payload["language"], payload["code"], FLAG_FD, work_dir)
