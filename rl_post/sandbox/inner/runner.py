"""The runner R of one run (stdlib only); its candidate D is candidate.py.

R is started by the zygote *before* its request arrives: in strict mode
cloned straight into fresh namespaces as their pid 1, where it maps the ids,
mounts the run's tmpfs and /proc and drops every capability; in process
mode forked, with a fresh temporary work dir. R then forks D, which confines
itself as far as it can without the request, and both wait. So the costly
part of a run (clone, namespaces, mounts, two forks) happens while the
previous run executes, off the critical path.

When the zygote hands R the run header (limits only), R starts the clock
and wakes D. D reads the payload frame (code, stdin, files, limits) from
the channel itself, writes the input files, finishes its confinement and
runs the code. R supervises D, kills whatever is left, collects the work
dir's files and writes the reply frame. So the candidate's code, inputs and
outputs never pass through the zygote's memory, and no later run (forked
from the zygote) can find them there.
"""

import fcntl
import os
import signal
import stat
import time
import traceback

import candidate
import jail
import supervise
import wire

_MAX_DEPTH = 8
# R to the zygote: TAKEN once it has the run header (until then the payload
# is untouched and another runner can take the request), DONE once the
# reply is being written in full (the channel is in step again).
TAKEN, DONE = b"T", b"1"


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


def _read_nonblocking(fd, n):
  fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
  try:
    return os.read(fd, n)
  except OSError:
    return b""


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


class _Prepared:
  """A runner's state between preparation and its request."""

  def __init__(self, ctx, work_dir):
    self.ctx = ctx
    self.work_dir = work_dir
    self.d = None
    self.fds = {}

  def kill(self):
    if self.ctx["mode"] == "strict":
      _kill_namespace()
    elif self.d is not None:
      try:
        os.killpg(self.d, signal.SIGKILL)
      except OSError:
        pass


def _prepare_strict(ctx):
  """In the cloned pid 1 of the run's namespaces (see jail.py)."""
  jail.write_id_maps(*ctx["outer_ids"])
  jail.mount_run_filesystems(ctx["work_mb"], ctx["tmp_mb"])
  jail.mount_run_proc()
  # As pid 1, signals from inside the namespace reach only handlers we
  # install; drop Python's SIGINT handler so nothing can interrupt us.
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  # R needs no capability from here on, and D inherits the empty sets.
  jail.drop_capabilities()
  return jail.WORK_DIR


def _prepare_process(ctx):
  import tempfile  # pylint: disable=g-import-not-at-top
  return tempfile.mkdtemp(prefix="run-", dir=ctx["tmp_root"])


def _fork_candidate(prep, chan_in):
  """Forks D, which confines itself and waits for the go byte."""
  strict = prep.ctx["mode"] == "strict"
  out_r, out_w = os.pipe()
  err_r, err_w = os.pipe()
  flag_r, flag_w = os.pipe()
  setup_r, setup_w = os.pipe()
  go_r, go_w = os.pipe()
  if strict:
    jail.set_dumpable(False)  # D shares our uid: keep it out of our memory
  try:
    d = os.fork()
  except OSError:
    for fd in (out_r, out_w, err_r, err_w, flag_r, flag_w, setup_r, setup_w,
               go_r, go_w):
      os.close(fd)
    raise
  if d == 0:
    if strict:
      jail.set_dumpable(True)  # its own /proc/self, as in a normal process
    try:
      signal.signal(signal.SIGINT, signal.default_int_handler)
      for fd in (out_r, err_r, flag_r, setup_r, go_w):
        os.close(fd)
      candidate.candidate_main(
          prep.ctx, {"go": go_r, "chan_in": chan_in, "out": out_w,
                     "err": err_w, "flag": flag_w, "setup": setup_w},
          prep.work_dir)
    finally:
      os._exit(127)  # D never returns into the runner's code
  for fd in (out_w, err_w, flag_w, setup_w, go_r):
    os.close(fd)
  prep.d = d
  prep.fds = {"out": out_r, "err": err_r, "flag": flag_r, "setup": setup_r,
              "go": go_w}


def prepare(ctx, chan_in):
  """R before its request: the run's filesystem, and D forked and waiting."""
  strict = ctx["mode"] == "strict"
  prep = _Prepared(ctx, (_prepare_strict if strict else _prepare_process)(ctx))
  try:
    _fork_candidate(prep, chan_in)
  except OSError:  # no process slot while the current run holds them all:
    _log_traceback()  # fork it when the request comes (_wake_candidate)
  return prep


def _wake_candidate(prep, chan_in):
  """Sends D its go byte; a D that died while waiting is replaced first."""
  dead = prep.d is None
  if not dead:
    try:
      dead = os.waitpid(prep.d, os.WNOHANG)[0] != 0
    except ChildProcessError:
      dead = True
  if dead:
    for fd in prep.fds.values():
      os.close(fd)
    prep.fds = {}
    _fork_candidate(prep, chan_in)
  os.write(prep.fds["go"], b"1")
  os.close(prep.fds.pop("go"))
  os.close(chan_in)


def _run(prep, header, deadline, chan_in):
  """Starts D on the request and supervises it to the end."""
  _wake_candidate(prep, chan_in)
  fds = prep.fds
  strict = prep.ctx["mode"] == "strict"
  outcome = supervise.watch(prep.d, prep.kill, fds["out"], fds["err"],
                            deadline, header["max_output_bytes"],
                            1.0 if strict else 0.05)
  if strict:
    _kill_namespace()
    wait_status = _reap_all(prep.d)  # after this no process of the run is left
  else:
    _, wait_status = os.waitpid(prep.d, 0)
    prep.kill()  # the rest of its process group
  flag = _read_nonblocking(fds["flag"], 16).decode("utf-8", "replace")
  setup = _read_nonblocking(fds["setup"], 4096)
  mark = candidate.PAYLOAD_READ
  payload_read = setup.startswith(mark)
  outcome.setup_error = setup[len(mark) if payload_read else 0:].decode(
      "utf-8", "replace")
  if not payload_read and not outcome.setup_error:
    outcome.setup_error = "the candidate exited before reading its request"
  files, omitted = collect_files(prep.work_dir, header["max_files_out"],
                                 header["max_files_out_bytes"])
  return outcome, wait_status, flag, files, omitted, payload_read


def runner_main(ctx, go_r, chan_in, chan_out, done_w):
  """R: prepares, waits for its request, runs it, replies. Never returns.

  On `done_w` R writes TAKEN when it has the run header, and DONE when the
  reply frame is being written in full and the channel is in step; without
  DONE the zygote exits and the worker is replaced.
  """
  jail.set_name("sb-runner")
  jail.close_fds_except([0, 1, 2, go_r, chan_in, chan_out, done_w])
  os.setsid()
  devnull = os.open("/dev/null", os.O_RDWR)
  os.dup2(devnull, 0)
  os.dup2(devnull, 1)
  os.close(devnull)
  prep, prep_error = None, None
  try:
    prep = prepare(ctx, chan_in)
  except BaseException as e:  # pylint: disable=broad-except
    prep_error = f"runner setup: {type(e).__name__}: {e}"
    _log_traceback()
  try:
    _, header = wire.read_run_header(go_r)
    os.write(done_w, TAKEN)
  except BaseException:  # pylint: disable=broad-except
    if prep is not None:
      prep.kill()
    os._exit(0)  # no request: the zygote is gone or replaced us
  t0 = time.monotonic()
  reply = {"event": "result"}
  payload_read = False
  try:
    if prep is None:
      wire.read_frame(chan_in)  # keep the channel in step, then report
      payload_read = True
      raise RuntimeError(prep_error)
    outcome, wait_status, flag, files, omitted, payload_read = _run(
        prep, header, t0 + header["timeout_s"], chan_in)
    reply.update(
        stdout=bytes(outcome.out["stdout"]),
        stderr=bytes(outcome.out["stderr"]),
        timed_out=outcome.timed_out, output_limit=outcome.output_limit,
        error=outcome.error, setup_error=outcome.setup_error,
        wait_status=wait_status, flag=flag,
        files=files, files_omitted=omitted)
  except BaseException as e:  # pylint: disable=broad-except
    reply["error"] = f"runner: {type(e).__name__}: {e}"
    _log_traceback()
  finally:
    if prep is not None and prep.ctx["mode"] == "process":
      import shutil  # pylint: disable=g-import-not-at-top
      shutil.rmtree(prep.work_dir, ignore_errors=True)
  reply["wall_s"] = time.monotonic() - t0
  try:
    data = wire.encode(reply)
    if payload_read:
      # Announce first: in process mode the host sweeps the worker's cgroup
      # (this runner included) as soon as it has read the reply.
      os.write(done_w, DONE)
    view = memoryview(data)
    while view:
      view = view[os.write(chan_out, view):]
  except BaseException:  # pylint: disable=broad-except
    os._exit(4)
  os._exit(0)


def _log_traceback():
  try:
    os.write(2, traceback.format_exc().encode()[-2000:])
  except BaseException:  # pylint: disable=broad-except
    pass
