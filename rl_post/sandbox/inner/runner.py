"""The per-run processes: runner R and candidate D (stdlib only).

The zygote reads only a small header frame (limits) and starts R: in strict
mode cloned straight into the run's new namespaces as their pid 1, in
process mode forked. R reads the payload frame (code, stdin, files) from the
channel itself, sets the run up, forks D, supervises it, collects the files
and writes the reply frame. So the candidate's code, inputs and outputs
never pass through the zygote's memory, and no later run (forked from the
zygote) can find them there.
"""

import fcntl
import os
import signal
import stat
import time
import traceback

import harness
import jail
import seccomp_bpf
import supervise
import wire

FLAG_FD = 3  # the candidate may write "M" (MemoryError) here; only a failure
SETUP_FD = 4  # setup errors; closed before any candidate code runs
_MAX_DEPTH = 8


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


def collect_files(root, max_files, max_total_bytes):
  """Regular files under root (no symlinks followed), within the caps."""
  files, omitted, total = {}, [], 0
  stack = [("", root, 0)]
  while stack:
    rel, path, depth = stack.pop()
    try:
      entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
      continue
    for entry in entries:
      name = rel + entry.name
      try:
        st = entry.stat(follow_symlinks=False)
      except OSError:
        omitted.append(name)
        continue
      if stat.S_ISDIR(st.st_mode):
        if depth < _MAX_DEPTH:
          stack.append((name + "/", entry.path, depth + 1))
        else:
          omitted.append(name + "/")
        continue
      if (not stat.S_ISREG(st.st_mode) or len(files) >= max_files or
          total + st.st_size > max_total_bytes):
        omitted.append(name)
        continue
      try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
          data = f.read(max_total_bytes - total + 1)
      except OSError:
        omitted.append(name)
        continue
      if total + len(data) > max_total_bytes:
        omitted.append(name)
        continue
      files[name] = data
      total += len(data)
  return files, omitted


def candidate_main(req, stdin_fd, out_w, err_w, flag_w, setup_w, work_dir,
                   strict):
  """D: confine this process, then run the candidate. Never returns."""
  try:
    jail.set_name("sb-candidate")
    os.setsid()
    if stdin_fd < 0:
      stdin_fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(flag_w, FLAG_FD)
    os.dup2(setup_w, SETUP_FD)
    jail.close_fds_except([0, 1, 2, FLAG_FD, SETUP_FD])
    os.chdir(work_dir)
    jail.clean_environment(work_dir)
    jail.raise_oom_score()
    jail.set_limits(req["limits"])
    if strict:
      jail.drop_capabilities()
    if req["seccomp"]:
      seccomp_bpf.install(jail.libc)
    # From here on nothing the candidate does can claim a sandbox failure.
    os.close(SETUP_FD)
  except BaseException as e:  # pylint: disable=broad-except
    try:
      os.write(SETUP_FD, f"{type(e).__name__}: {e}".encode())
    finally:
      os._exit(126)
  harness.run(req["language"], req["code"], FLAG_FD, work_dir)


def _read_nonblocking(fd, n):
  fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
  try:
    return os.read(fd, n)
  except OSError:
    return b""


def _stdin_fd(data):
  if not data:
    return -1
  fd = os.memfd_create("stdin", 0)
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]
  os.lseek(fd, 0, os.SEEK_SET)
  return fd


def _kill_namespace():
  """From pid 1: SIGKILL every other process of the run's pid namespace."""
  try:
    os.kill(-1, signal.SIGKILL)
  except ProcessLookupError:
    pass


def _reap_all(pid):
  """Reaps every child (orphans are ours as pid 1); returns pid's status."""
  status = None
  while True:
    try:
      reaped, st = os.waitpid(-1, 0)
    except ChildProcessError:
      return status
    if reaped == pid:
      status = st


def _strict_run(req, stdin_fd, out_w, err_w, watch):
  """In the cloned pid 1 of the run's namespaces (see jail.py)."""
  outer_uid, outer_gid = req["outer_ids"]
  jail.write_id_maps(outer_uid, outer_gid)
  jail.mount_run_filesystems(req["work_mb"], req["tmp_mb"])
  jail.mount_run_proc()
  write_input_files(jail.WORK_DIR, req["files"])
  # As pid 1, signals from inside the namespace reach only handlers we
  # install; drop Python's SIGINT handler so nothing can interrupt us.
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  flag_r, flag_w = os.pipe()
  setup_r, setup_w = os.pipe()
  jail.set_dumpable(False)  # D shares our uid: keep it out of our memory
  d = os.fork()
  if d == 0:
    jail.set_dumpable(True)  # its own /proc/self, as in a normal process
    signal.signal(signal.SIGINT, signal.default_int_handler)
    candidate_main(req, stdin_fd, out_w, err_w, flag_w, setup_w,
                   jail.WORK_DIR, True)
  for fd in (stdin_fd, out_w, err_w, flag_w, setup_w):
    if fd >= 0:
      os.close(fd)
  jail.drop_capabilities(bounding=False)
  outcome = watch(d, _kill_namespace, 1.0)
  _kill_namespace()
  wait_status = _reap_all(d)  # after this no process of the run is left
  flag = _read_nonblocking(flag_r, 16).decode("utf-8", "replace")
  outcome.setup_error = _read_nonblocking(setup_r, 4096).decode(
      "utf-8", "replace")
  files, omitted = collect_files(jail.WORK_DIR, req["max_files_out"],
                                 req["max_files_out_bytes"])
  return outcome, wait_status, flag, files, omitted


def _process_run(req, stdin_fd, out_w, err_w, watch):
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  work_dir = tempfile.mkdtemp(prefix="run-", dir=req["process_tmp_root"])
  try:
    write_input_files(work_dir, req["files"])
    flag_r, flag_w = os.pipe()
    setup_r, setup_w = os.pipe()
    d = os.fork()
    if d == 0:
      candidate_main(req, stdin_fd, out_w, err_w, flag_w, setup_w, work_dir,
                     False)
    for fd in (stdin_fd, out_w, err_w, flag_w, setup_w):
      if fd >= 0:
        os.close(fd)
    def kill_group():
      try:
        os.killpg(d, signal.SIGKILL)
      except OSError:
        pass

    outcome = watch(d, kill_group, 0.05)
    _, wait_status = os.waitpid(d, 0)
    kill_group()  # the rest of its process group
    flag = _read_nonblocking(flag_r, 16).decode("utf-8", "replace")
    outcome.setup_error = _read_nonblocking(setup_r, 4096).decode(
        "utf-8", "replace")
    files, omitted = collect_files(work_dir, req["max_files_out"],
                                   req["max_files_out_bytes"])
    return outcome, wait_status, flag, files, omitted
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


def runner_main(header, chan_in, chan_out, done_w):
  """R: reads the payload, runs it, writes the reply. Never returns.

  A byte on `done_w` means the reply frame is being written in full; without
  it the channel is in an unknown state (the zygote then exits).
  """
  t0 = time.monotonic()
  jail.set_name("sb-runner")
  try:
    payload = wire.read_frame(chan_in)
  except BaseException:  # pylint: disable=broad-except
    os._exit(3)
  reply = {"event": "result"}
  try:
    req = dict(header, **payload)
    os.setsid()
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    stdin_fd = _stdin_fd(req["stdin"])
    deadline = t0 + req["timeout_s"]

    def watch(top, kill, drain_s):
      return supervise.watch(top, kill, out_r, err_r, deadline,
                             req["max_output_bytes"], drain_s)

    run = _strict_run if req["mode"] == "strict" else _process_run
    outcome, wait_status, flag, files, omitted = run(
        req, stdin_fd, out_w, err_w, watch)
    reply.update(
        stdout=bytes(outcome.out["stdout"]),
        stderr=bytes(outcome.out["stderr"]),
        timed_out=outcome.timed_out, output_limit=outcome.output_limit,
        error=outcome.error, setup_error=outcome.setup_error,
        wait_status=wait_status, flag=flag,
        files=files, files_omitted=omitted)
  except BaseException as e:  # pylint: disable=broad-except
    reply["error"] = f"runner: {type(e).__name__}: {e}"
    try:
      os.write(2, traceback.format_exc().encode()[-2000:])
    except BaseException:  # pylint: disable=broad-except
      pass
  reply["wall_s"] = time.monotonic() - t0
  try:
    data = wire.encode(reply)
    # Announce first: in process mode the host sweeps the worker's cgroup
    # (this runner included) as soon as it has read the reply.
    os.write(done_w, b"1")
    view = memoryview(data)
    while view:
      view = view[os.write(chan_out, view):]
  except BaseException:  # pylint: disable=broad-except
    os._exit(4)
  os._exit(0)
