"""Sandbox: a pool of warm zygote workers behind run / run_many / submit.

    with Sandbox(SandboxConfig(num_workers=2)) as sb:
      r = sb.run("print(1 + 1)")
      rs = sb.run_many([RunRequest("print(i)") for i in ...])
      fut = sb.submit("print(2)")           # concurrent.futures.Future
      r = await sb.run_async("print(3)")    # asyncio

Workers are separate processes started with subprocess (the trainer process
is never forked). A worker is replaced after `max_runs_per_worker` runs and
after any sign of damage: a protocol error, a late or missing reply, or a
sandbox_error. Every failure becomes an ExecResult with status
"sandbox_error" and a message, counted in `stats()`.
"""

import asyncio
import atexit
import concurrent.futures
import dataclasses
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
import weakref

from rl_post.sandbox import cgroups
from rl_post.sandbox import launcher
from rl_post.sandbox import request as request_lib
from rl_post.sandbox import result as result_lib
from rl_post.sandbox import stats as stats_lib
from rl_post.sandbox import worker as worker_lib
from rl_post.sandbox.config import SandboxConfig

_LIVE = weakref.WeakSet()


@atexit.register
def _close_all():
  for sb in list(_LIVE):
    sb.close()


class Sandbox:
  """Runs untrusted programs in confined, warm, recycled workers."""

  def __init__(self, config=None):
    self.config = config or SandboxConfig()
    if not isinstance(self.config, SandboxConfig):
      raise ValueError(f"config must be a SandboxConfig, got "
                       f"{type(self.config).__name__}")
    self._closed = False
    self._lock = threading.Lock()
    self._busy = 0  # runs in flight
    self._cpus = len(os.sched_getaffinity(0))
    self._stats = stats_lib.SandboxStats()
    self._workers = []
    self._idle = queue.Queue()
    self._executor = None
    self._tmp = None
    launcher.check_host(self.config)
    self._cgroup_root = cgroups.detect(self.config.cgroups)
    _LIVE.add(self)
    try:
      self._start()
    except BaseException:
      self.close()
      raise

  # -- start-up and shutdown ----------------------------------------------
  def _start(self):
    c = self.config
    self._tmp = tempfile.mkdtemp(prefix="rl_post_sandbox_host_")
    stage = launcher.stage_inner_code()
    shutil.move(stage, os.path.join(self._tmp, "inner"))
    stage = os.path.join(self._tmp, "inner")
    os.chmod(self._tmp, 0o755)
    process_root = os.path.join(self._tmp, "runs")
    os.mkdir(process_root, 0o700)
    if os.geteuid() == 0:
      os.chown(process_root, c.sandbox_uid, c.sandbox_gid)
    pool_id = uuid.uuid4().hex[:10]
    for i in range(c.num_workers):
      w = worker_lib.Worker(c, stage, self._cgroup_root, pool_id, i,
                            self._tmp, process_root)
      self._workers.append(w)
      w.spawn()
    for w in self._workers:
      try:
        w.wait_ready()
      except worker_lib.WorkerError as e:
        raise launcher.SandboxUnavailableError(
            f"{c.isolation} sandbox worker failed to start: {e}\n"
            f"{w.log_tail()}\n{launcher.INSTALL_HINT}") from None
    # One real run proves the namespaces, mounts and seccomp work here.
    probe = self._workers[0].run(request_lib.to_wire(
        c, request_lib.RunRequest("print('ok')", timeout_s=30)))
    if probe.status != "ok" or probe.stdout != "ok\n":
      raise launcher.SandboxUnavailableError(
          f"{c.isolation} sandbox self-test failed: status={probe.status} "
          f"{probe.message} {probe.stderr[-1000:]}\n"
          f"{self._workers[0].log_tail()}\n{launcher.INSTALL_HINT}")
    for w in self._workers:
      self._idle.put(w)
    self._executor = concurrent.futures.ThreadPoolExecutor(
        max_workers=c.num_workers, thread_name_prefix="sandbox")

  def close(self):
    """Kills every worker and everything they started; idempotent."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
    if self._executor is not None:
      self._executor.shutdown(wait=False, cancel_futures=True)
    for w in self._workers:
      w.stop()
    if self._tmp is not None:
      shutil.rmtree(self._tmp, ignore_errors=True)
    _LIVE.discard(self)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __del__(self):
    try:
      self.close()
    except Exception:  # pylint: disable=broad-except
      pass

  # -- running -------------------------------------------------------------
  def run(self, code, *, language="python", stdin="", files=None,
          timeout_s=None, memory_mb=None):
    """Runs one program; returns an ExecResult (never raises for it).

    Raises:
      ValueError: a bad argument, naming the field.
      RuntimeError: the sandbox is closed.
    """
    req = request_lib.RunRequest(code, language, stdin, files, timeout_s,
                                 memory_mb)
    return self._execute(request_lib.to_wire(self.config, req))

  def run_many(self, requests):
    """Runs requests in parallel on all workers; results in input order.

    Every request is validated before any runs. Items may be RunRequest,
    a dict of `run` keyword arguments (with "code"), or a code string.
    """
    wires = [request_lib.to_wire(self.config, _as_request(r, i))
             for i, r in enumerate(requests)]
    self._check_open()
    return list(self._executor.map(self._execute, wires))

  def submit(self, code, **kwargs):
    """Like `run`, but returns a concurrent.futures.Future at once."""
    req = _as_request(dict(kwargs, code=code), 0)
    wire_req = request_lib.to_wire(self.config, req)
    self._check_open()
    return self._executor.submit(self._execute, wire_req)

  async def run_async(self, code, **kwargs):
    """Awaitable `run` (for overlapping rewards with generation)."""
    return await asyncio.wrap_future(self.submit(code, **kwargs))

  def stats(self):
    """Counts per status, recycles and latency percentiles (host-side)."""
    out = self._stats.snapshot()
    out["isolation"] = self.config.isolation
    out["cgroups"] = (None if self._cgroup_root is None
                      else f"v{self._cgroup_root.version}")
    out["workers"] = len(self._workers)
    return out

  def _check_open(self):
    if self._closed:
      raise RuntimeError("Sandbox is closed")

  def _execute(self, wire_req):
    self._check_open()
    t0 = time.monotonic()
    w = self._idle.get()
    with self._lock:
      self._busy += 1
      # Prepare the next run meanwhile only if a CPU is left over for it.
      ahead = self._busy < self._cpus
    try:
      if self._closed:
        raise RuntimeError("Sandbox is closed")
      try:
        res = w.run(wire_req, prepare_ahead=ahead)
      except worker_lib.WorkerError as e:
        w.damaged = True
        res = result_lib.sandbox_error(f"worker failure: {e}",
                                       time.monotonic() - t0)
      except Exception as e:  # pylint: disable=broad-except
        w.damaged = True
        res = result_lib.sandbox_error(
            f"internal error: {type(e).__name__}: {e}", time.monotonic() - t0)
      if not self._closed:
        self._maybe_recycle(w)
    finally:
      with self._lock:
        self._busy -= 1
      self._idle.put(w)
    self._stats.record(res, time.monotonic() - t0)
    return res

  def _maybe_recycle(self, w):
    reason = None
    if w.damaged:
      reason = "damaged"
    elif w.runs >= self.config.max_runs_per_worker:
      reason = "max_runs"
    elif w.proc is None or w.proc.poll() is not None:
      reason = "dead"
    if reason is None:
      return
    self._stats.recycled(reason)
    w.stop()
    try:
      w.spawn()  # readiness is awaited by the next run on this worker
    except Exception:  # pylint: disable=broad-except
      w.damaged = True


def _as_request(item, index):
  if isinstance(item, request_lib.RunRequest):
    return item
  if isinstance(item, (str, bytes)):
    return request_lib.RunRequest(item)
  if isinstance(item, dict):
    unknown = set(item) - {f.name for f in
                           dataclasses.fields(request_lib.RunRequest)}
    if unknown or "code" not in item:
      raise ValueError(f"requests[{index}]: expected RunRequest fields "
                       f"(code, language, stdin, files, timeout_s, "
                       f"memory_mb), got {sorted(item)}")
    return request_lib.RunRequest(**item)
  raise ValueError(f"requests[{index}] must be a RunRequest, dict or code "
                   f"string, got {type(item).__name__}")
