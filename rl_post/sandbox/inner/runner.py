"""The forked per-run processes: runner R, init C, candidate D (stdlib only).

R reports to the zygote on a status pipe with wire frames:
  {"event": "started", "kill_pid": pid, "kill_group": bool}
  {"event": "done", "wait_status": int | None, "flag": str, "files": {...},
   "files_omitted": [...]}
  {"event": "error", "message": str}     (setup failed; nothing ran)
"""

import fcntl
import os
import signal
import stat
import struct
import traceback

import harness
import jail
import seccomp_bpf
import wire

FLAG_FD = 3
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


def _read_flag(fd):
  flags = fcntl.fcntl(fd, fcntl.F_GETFL)
  fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
  try:
    return os.read(fd, 4096).decode("utf-8", "replace")
  except (BlockingIOError, OSError):
    return ""


def candidate_main(req, stdin_fd, out_w, err_w, flag_w, work_dir, strict):
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
    jail.close_fds_except([0, 1, 2, FLAG_FD])
    os.chdir(work_dir)
    jail.clean_environment(work_dir)
    jail.raise_oom_score()
    jail.set_limits(req["limits"])
    if strict:
      jail.drop_capabilities()
    if req["seccomp"]:
      seccomp_bpf.install(jail.libc)
  except BaseException as e:  # pylint: disable=broad-except
    try:
      os.write(FLAG_FD, f"E{type(e).__name__}: {e}".encode())
    finally:
      os._exit(126)
  harness.run(req["language"], req["code"], FLAG_FD, work_dir)


def init_main(req, alive_r, stdin_fd, out_w, err_w, flag_w, status_w):
  """C: pid 1 of the run. Reaps everything, reports D's wait status."""
  try:
    jail.set_name("sb-init")
    jail.die_with_parent(alive_r)
    jail.mount_run_proc()
    d = os.fork()
    if d == 0:
      candidate_main(req, stdin_fd, out_w, err_w, flag_w, jail.WORK_DIR, True)
    for fd in (stdin_fd, out_w, err_w, flag_w):
      if fd >= 0:
        os.close(fd)
    jail.set_dumpable(False)  # D shares our uid: keep it out of our memory
    jail.drop_capabilities(bounding=False)
    while True:
      pid, status = os.waitpid(-1, 0)
      if pid == d:
        break
    os.write(status_w, struct.pack("<i", status))
  except BaseException:  # pylint: disable=broad-except
    try:  # fd 2 is the worker's log, not the candidate's stderr
      os.write(2, traceback.format_exc().encode()[-2000:])
    except BaseException:  # pylint: disable=broad-except
      pass
  os._exit(0)


def _strict_run(req, stdin_fd, out_w, err_w, st_w):
  jail.enter_run_namespaces()
  jail.mount_run_filesystems(req["work_mb"], req["tmp_mb"])
  write_input_files(jail.WORK_DIR, req["files"])
  flag_r, flag_w = os.pipe()
  cst_r, cst_w = os.pipe()
  alive_r, alive_w = os.pipe()
  c = os.fork()
  if c == 0:
    os.close(alive_w)
    init_main(req, alive_r, stdin_fd, out_w, err_w, flag_w, cst_w)
  for fd in (stdin_fd, out_w, err_w, flag_w, cst_w, alive_r):
    if fd >= 0:
      os.close(fd)
  wire.write_frame(st_w, {"event": "started", "kill_pid": c,
                          "kill_group": False})
  os.waitpid(c, 0)
  fcntl.fcntl(cst_r, fcntl.F_SETFL, os.O_NONBLOCK)
  try:
    raw = os.read(cst_r, 4)
  except BlockingIOError:
    raw = b""
  wait_status = struct.unpack("<i", raw)[0] if len(raw) == 4 else None
  flag = _read_flag(flag_r)
  files, omitted = collect_files(jail.WORK_DIR, req["max_files_out"],
                                 req["max_files_out_bytes"])
  return wait_status, flag, files, omitted


def _process_run(req, stdin_fd, out_w, err_w, st_w):
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  work_dir = tempfile.mkdtemp(prefix="run-", dir=req["process_tmp_root"])
  try:
    write_input_files(work_dir, req["files"])
    flag_r, flag_w = os.pipe()
    d = os.fork()
    if d == 0:
      candidate_main(req, stdin_fd, out_w, err_w, flag_w, work_dir, False)
    for fd in (stdin_fd, out_w, err_w, flag_w):
      if fd >= 0:
        os.close(fd)
    wire.write_frame(st_w, {"event": "started", "kill_pid": d,
                            "kill_group": True})
    _, wait_status = os.waitpid(d, 0)
    try:
      os.killpg(d, signal.SIGKILL)
    except OSError:
      pass
    flag = _read_flag(flag_r)
    files, omitted = collect_files(work_dir, req["max_files_out"],
                                   req["max_files_out_bytes"])
    return wait_status, flag, files, omitted
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


def runner_main(req, stdin_fd, out_w, err_w, st_w):
  """R: never returns."""
  try:
    jail.set_name("sb-runner")
    os.setsid()
    jail.close_fds_except([fd for fd in (0, 1, 2, stdin_fd, out_w, err_w,
                                         st_w) if fd >= 0])
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    run = _strict_run if req["mode"] == "strict" else _process_run
    wait_status, flag, files, omitted = run(req, stdin_fd, out_w, err_w, st_w)
    wire.write_frame(st_w, {"event": "done", "wait_status": wait_status,
                            "flag": flag, "files": files,
                            "files_omitted": omitted})
  except BaseException as e:  # pylint: disable=broad-except
    try:
      wire.write_frame(st_w, {"event": "error", "message":
                              f"{type(e).__name__}: {e}",
                              "trace": traceback.format_exc()[-2000:]})
    except BaseException:  # pylint: disable=broad-except
      pass
  os._exit(0)
