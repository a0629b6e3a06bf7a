"""Host side of one warm worker: start, send a request, read the reply.

Everything the worker says is untrusted data: frames are size-capped JSON,
fields are type-checked in result.from_report, and a worker that is late,
silent, dead or incoherent is killed and replaced (never trusted again).
"""

import os
import select
import signal
import time

from rl_post.sandbox import cgroups
from rl_post.sandbox import launcher
from rl_post.sandbox import result as result_lib
from rl_post.sandbox.inner import wire

# The worker enforces the run's deadline itself; the host gives it this much
# extra before it declares the worker hung and kills it from outside.
_HOST_GRACE_S = 10.0
_ZYGOTE_OVERHEAD_MB = 64
# bwrap x2, zygote, the running runner, the next run's runner + candidate
# (prepared ahead), a runner still exiting (+ slack).
_EXTRA_TASKS = 10


_PAYLOAD_KEYS = ("language", "code", "stdin", "files", "limits", "seccomp")


class WorkerError(Exception):
  """The worker broke the protocol or died; it must be replaced."""


class Worker:
  """One zygote process (inside bubblewrap in strict mode)."""

  def __init__(self, config, stage, cgroup_root, pool_id, index, log_dir,
               process_tmp_root):
    self.config = config
    self.stage = stage
    self.cgroup_root = cgroup_root
    self.pool_id = pool_id
    self.index = index
    self.log_path = os.path.join(log_dir, f"worker{index}.log")
    self.process_tmp_root = process_tmp_root
    self.generation = 0
    self.proc = None
    self.cgroup = None
    self.info = None
    self.runs = 0
    self.damaged = False

  # -- lifecycle ---------------------------------------------------------
  def spawn(self):
    """Starts the process without waiting for it (see wait_ready)."""
    self.generation += 1
    self.runs, self.damaged, self.info = 0, False, None
    if self.cgroup_root is not None:
      self.cgroup = self.cgroup_root.create(
          cgroups.new_name(self.pool_id, self.index, self.generation))
      self.cgroup.set_limits(
          (self.config.memory_mb + _ZYGOTE_OVERHEAD_MB) << 20,
          self.config.max_procs + _EXTRA_TASKS)
    self.proc = launcher.spawn(self.config, self.stage, self.cgroup,
                               self.log_path, self.process_tmp_root)
    self._reader = wire.FrameReader(max_bytes=self._max_reply_bytes())
    self._spawned_at = time.monotonic()

  def wait_ready(self):
    if self.info is not None:
      return
    deadline = self._spawned_at + self.config.startup_timeout_s
    msg = self._read(deadline)
    if msg.get("event") != "ready":
      raise WorkerError(f"worker sent {msg.get('event')!r} instead of ready")
    self.info = msg

  @property
  def ready(self):
    return self.info is not None

  def log_tail(self, n=2000):
    try:
      with open(self.log_path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - n))
        return f.read().decode("utf-8", "replace")
    except OSError:
      return ""

  def stop(self):
    """Kills the worker and everything it started; never raises."""
    proc, self.proc = self.proc, None
    if proc is not None:
      for fn in (lambda: os.killpg(proc.pid, signal.SIGKILL),
                 lambda: proc.kill()):
        try:
          fn()
        except OSError:
          pass
    if self.cgroup is not None:
      self.cgroup.kill_all()
    if proc is not None:
      for stream in (proc.stdin, proc.stdout):
        try:
          stream.close()
        except OSError:
          pass
      try:
        proc.wait(timeout=5)
      except Exception:  # pylint: disable=broad-except
        pass
    if self.cgroup is not None:
      for _ in range(100):
        if not self.cgroup.pids():
          break
        time.sleep(0.01)
      self.cgroup.remove()
      self.cgroup = None

  # -- one run -------------------------------------------------------------
  def run(self, wire_req, prepare_ahead=True):
    """Executes one validated request; returns an ExecResult.

    prepare_ahead: the worker prepares its next run while this one runs
    (worth it when a CPU is free for it; otherwise preparing on demand
    keeps it from competing with the other workers' runs).

    Raises:
      WorkerError: the worker must be replaced (the caller reports a
        sandbox_error for this request).
    """
    self.wait_ready()
    req = dict(wire_req)
    req["prepare_ahead"] = int(bool(prepare_ahead))
    req["limits"] = dict(req["limits"])
    req["limits"]["address_space_bytes"] = (
        self.info.get("vm_size_bytes", 0) + (req["memory_mb"] << 20))
    oom_before = 0
    if self.cgroup is not None:
      self.cgroup.set_limits(
          (req["memory_mb"] + _ZYGOTE_OVERHEAD_MB) << 20,
          self.config.max_procs + _EXTRA_TASKS)
      oom_before = self.cgroup.oom_kills()
    # A binary header (limits) for the zygote and the runner; the payload
    # frame for the candidate only.
    payload = {k: req[k] for k in _PAYLOAD_KEYS}
    try:
      os.write(self.proc.stdin.fileno(),
               wire.encode_run_header(req) + wire.encode(payload))
    except OSError as e:
      raise WorkerError(f"cannot send to worker: {e}") from None
    deadline = time.monotonic() + req["timeout_s"] + _HOST_GRACE_S
    reply = self._read(deadline)
    self.runs += 1
    if reply.get("event") != "result":
      raise WorkerError(f"unexpected reply {reply.get('event')!r}")
    oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
    if self.config.isolation == "process" and self.cgroup is not None:
      self.cgroup.kill_all(keep=self._worker_pids())  # escaped daemons
    res = result_lib.from_report(reply, oom_killed=oom)
    if res.status == "sandbox_error":
      self.damaged = True
    return res

  def _worker_pids(self):
    return {self.proc.pid} if self.proc is not None else set()

  def _max_reply_bytes(self):
    c = self.config
    raw = 2 * c.max_output_bytes + (c.max_files_out_mb << 20)
    return raw * 4 // 3 + (1 << 20)  # base64 + JSON

  def _read(self, deadline):
    if self.proc is None:
      raise WorkerError("worker is not running")
    fd = self.proc.stdout.fileno()
    while True:
      try:
        msg = self._reader.pop()
      except wire.WireError as e:
        raise WorkerError(str(e)) from None
      if msg is not None:
        return msg
      wait = deadline - time.monotonic()
      if wait <= 0:
        raise WorkerError("worker did not answer in time")
      poller = select.poll()
      poller.register(fd, select.POLLIN)
      if not poller.poll(int(wait * 1000) + 1):
        continue
      data = os.read(fd, 1 << 20)
      if not data:
        raise WorkerError("worker exited: " + self.log_tail(600).strip())
      try:
        self._reader.feed(data)
      except wire.WireError as e:
        raise WorkerError(str(e)) from None
