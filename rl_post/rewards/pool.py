"""Verifiers run in our own worker processes, under a time budget per item.

    with RewardPool(RewardConfig(num_workers=4), domain_options) as pool:
      pending = pool.submit(tasks, completions)   # workers start at once
      ...                                         # e.g. reference log-probs
      batch = pending.result()                    # RewardBatch

Workers are `python -m rl_post.rewards.worker` subprocesses (never a fork
of the trainer, which holds JAX threads) speaking a pipe protocol. Items
are grouped per domain and split into one job per worker; a worker
verifies a job one completion at a time, or with one `verify_batch` call
for domains that grade in batches (through the worker's shared sandbox).
Each unit of work has a budget of `timeout_s` per completion, measured
from when the pool sees it start. A worker that exits, is killed (OOM,
segfault) or overruns its budget is killed and replaced: the completions
of the unit it was in become counted "crash"/"timeout" errors scored 0,
its other completions go to the replacement. Workers die with the
trainer (see worker.py). Not thread-safe: one caller at a time.
"""

import atexit
import collections
import dataclasses
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from typing import Sequence

from rl_post.rewards import verdicts as verdicts_lib
from rl_post.rewards import worker as worker_lib
from rl_post.rewards.local import LocalVerifier, group_by_domain
from rl_post.rewards.scoring import ERROR_KINDS, RewardBatch, RewardConfig, combine
from rl_post.tasks.base import Task

MAX_STARTUP_FAILURES = 3  # in a row; then the environment is broken, not a verifier
_LIVE = weakref.WeakSet()


@atexit.register
def _close_all():
  for pool in list(_LIVE):
    pool.close()


@dataclasses.dataclass(eq=False)
class _Job:
  pending: "PendingRewards"
  indices: list[int]  # positions in the pending batch
  domain: str
  job_id: int = 0
  unit: tuple[int, int, float] | None = None  # (offset, count, deadline) in progress


class _Worker:
  """One worker process and its queue of jobs (the first is in progress)."""

  def __init__(self, env: dict, sandbox_config, tmp_root: str):
    self.tmp = tempfile.mkdtemp(prefix="worker_", dir=tmp_root)  # its sandbox's files
    os.chmod(self.tmp, 0o755)  # the sandbox's unprivileged user reads its code there
    self.proc = subprocess.Popen([sys.executable, "-m", "rl_post.rewards.worker"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=dict(env, TMPDIR=self.tmp), start_new_session=True)
    self.out_fd, self.in_fd = self.proc.stdout.fileno(), self.proc.stdin.fileno()
    os.set_blocking(self.out_fd, False)
    os.set_blocking(self.in_fd, False)
    self.inbox, self.outbox = bytearray(), bytearray(worker_lib.encode(("init", sandbox_config)))
    self.jobs: collections.deque[_Job] = collections.deque()
    self.ready = False
    self.started = time.monotonic()
    self.dead: str | None = None  # why it is being replaced

  def flush(self):
    try:
      while self.outbox:
        del self.outbox[:os.write(self.in_fd, self.outbox)]
    except BlockingIOError:
      pass
    except OSError as e:  # BrokenPipe: it died; reading will show EOF
      self.dead = self.dead or f"pipe closed ({e.strerror})"

  def read(self) -> tuple[list, bool]:
    """(messages now available, end of file: the worker is gone)."""
    eof = False
    try:
      while chunk := os.read(self.out_fd, 1 << 20):
        self.inbox += chunk
      eof = True
    except BlockingIOError:
      pass
    return worker_lib.decode_frames(self.inbox), eof

  def kill(self, grace_s: float = 0.0):
    """Ends the worker: after `grace_s` for a clean exit (closing its pipe
    asks it to stop), else at once; then removes its temporary files."""
    try:
      self.proc.stdin.close()
      self.proc.wait(grace_s)
    except (OSError, subprocess.TimeoutExpired):
      pass
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)  # also any children in its group
    except (ProcessLookupError, PermissionError):
      pass
    self.proc.wait()
    self.proc.stdout.close()
    shutil.rmtree(self.tmp, ignore_errors=True)

  def pending_items(self) -> int:
    return sum(len(j.indices) for j in self.jobs)


def _worker_env() -> dict:
  env = dict(os.environ)
  env[worker_lib.PARENT_PID_ENV] = str(os.getpid())
  env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # same imports as here
  env["JAX_PLATFORMS"] = "cpu"  # verifiers never take an accelerator
  env["CUDA_VISIBLE_DEVICES"] = ""
  return env


class RewardPool:
  """Scores (task, completion) pairs; see the module docstring.

  Attributes:
    error_counts: kind -> completions failed so far, over the pool's life.
    replaced: workers replaced so far (crashes and timeouts).
  """

  def __init__(self, config: RewardConfig | None = None, domain_options=None):
    self.config = config or RewardConfig()
    self.domain_options = {k: dict(v) for k, v in (domain_options or {}).items()}
    self.error_counts = dict.fromkeys(ERROR_KINDS, 0)
    self.replaced = 0
    self._startup_failures = 0
    self._next_job = 0
    self._workers: list[_Worker] = []
    self._local = None
    self.tmp_root = None
    if self.config.num_workers == 0:
      self._local = LocalVerifier(self.config.sandbox_config())
      return
    self._env = _worker_env()
    self.tmp_root = tempfile.mkdtemp(prefix="rl_post_rewards_")
    os.chmod(self.tmp_root, 0o755)
    _LIVE.add(self)
    try:
      self._workers = [self._spawn() for _ in range(self.config.num_workers)]
      while not all(w.ready for w in self._workers):  # start-up never eats a time budget
        self._pump()
    except BaseException:
      self.close()
      raise

  # -- public API ---------------------------------------------------------
  def submit(self, tasks: Sequence[Task], completions: Sequence[str]) -> "PendingRewards":
    """Starts scoring; `.result()` on the return value gives a RewardBatch."""
    tasks, completions = list(tasks), list(completions)
    if len(tasks) != len(completions):
      raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
    pending = PendingRewards(self, tasks, completions)
    if self._local is not None:
      for i, raw in enumerate(self._local.verify_all(tasks, completions, self.domain_options)):
        pending.put(i, raw)
      return pending
    if self._workers is None:
      raise RuntimeError("RewardPool is closed")
    for name, idx in group_by_domain(tasks).items():
      k = min(len(self._workers), len(idx))
      for part in range(k):
        self._assign(_Job(pending, idx[part * len(idx) // k:(part + 1) * len(idx) // k], name))
    self._pump(0.0)  # send now so workers start while the caller does other work
    return pending

  def score(self, tasks: Sequence[Task], completions: Sequence[str]) -> RewardBatch:
    return self.submit(tasks, completions).result()

  def worker_pids(self) -> list[int]:
    return [w.proc.pid for w in self._workers or ()]

  def close(self):
    """Stops the workers (each closes its sandbox) and removes their files."""
    if self._local is not None:
      self._local.close()
    for w in self._workers or ():
      w.proc.stdin.close()  # all stop at once; then each gets what is left of 5 s
    deadline = time.monotonic() + 5.0
    for w in self._workers or ():
      w.kill(grace_s=max(deadline - time.monotonic(), 0.0))
    if self.tmp_root:
      shutil.rmtree(self.tmp_root, ignore_errors=True)
    self._workers = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # -- scheduling ---------------------------------------------------------
  def _spawn(self) -> _Worker:
    return _Worker(self._env, self.config.sandbox_config(), self.tmp_root)

  def _assign(self, job: _Job, worker: _Worker | None = None):
    worker = worker or min(self._workers, key=_Worker.pending_items)
    job.job_id, self._next_job = self._next_job, self._next_job + 1
    p = job.pending
    worker.outbox += worker_lib.encode((
        "job", job.job_id, job.domain, self.domain_options.get(job.domain),
        [p.tasks[i] for i in job.indices], [p.completions[i] for i in job.indices]))
    worker.jobs.append(job)

  def _pump(self, max_wait_s: float = 1.0):
    """Sends, receives, enforces budgets and replaces dead workers once."""
    for w in self._workers:
      w.flush()
    now = time.monotonic()
    deadlines = [self._deadline(w) for w in self._workers]
    wait = min([max_wait_s] + [d - now for d in deadlines if d is not None])
    by_fd = {w.out_fd: w for w in self._workers}
    readable, writable, _ = select.select(list(by_fd), [w.in_fd for w in self._workers
                                                         if w.outbox], [], max(wait, 0.0))
    for w in self._workers:
      if w.in_fd in writable:
        w.flush()
    active = set()
    for fd in readable:
      w = by_fd[fd]
      messages, eof = w.read()
      active.add(w)
      for message in messages:
        self._handle(w, message)
      if eof:
        w.dead = w.dead or f"exited with status {w.proc.wait()}"
    now = time.monotonic()
    for w in self._workers:
      deadline = self._deadline(w)
      if w not in active and deadline is not None and now > deadline and not w.dead:
        w.dead = "timeout"
    for i, w in enumerate(self._workers):
      if w.dead:
        self._workers[i] = self._replace(w)

  def _deadline(self, w: _Worker) -> float | None:
    if not w.ready:
      return w.started + self.config.startup_timeout_s
    if w.jobs and w.jobs[0].unit is not None:
      return w.jobs[0].unit[2]
    return None

  def _handle(self, w: _Worker, message):
    kind = message[0]
    if kind == "ready":
      w.ready, self._startup_failures = True, 0
      return
    job = w.jobs[0]
    if kind == "bad_job":  # its items cannot be verified anywhere: counted, not retried
      for i in job.indices:
        job.pending.put(i, verdicts_lib.failure("verifier_error", message[1]))
      w.jobs.popleft()
      return
    if message[1] != job.job_id:
      raise RuntimeError(f"reward worker protocol error: {message[:2]} while on job {job.job_id}")
    if kind == "start":
      _, _, offset, count = message
      job.unit = (offset, count, time.monotonic() + self.config.timeout_s * count)
    elif kind == "result":
      _, _, offset, results, next_unit = message
      for j, raw in enumerate(results):
        job.pending.put(job.indices[offset + j], raw)
      job.unit = None if next_unit is None else (
          *next_unit, time.monotonic() + self.config.timeout_s * next_unit[1])
    elif kind == "done":
      w.jobs.popleft()

  def _replace(self, w: _Worker) -> _Worker:
    """Kills `w`, fails the completions of its current unit, requeues the rest."""
    w.kill()
    self.replaced += 1
    if not w.ready:
      self._startup_failures += 1
      if self._startup_failures >= MAX_STARTUP_FAILURES:
        for job in w.jobs:
          for i in job.indices:
            job.pending.put(i, verdicts_lib.failure("crash", "reward workers cannot start"))
        raise RuntimeError(f"reward workers fail to start ({w.dead}) {MAX_STARTUP_FAILURES} "
                           "times in a row; see their stderr above")
    kind = "timeout" if w.dead == "timeout" else "crash"
    new = self._spawn()
    for job in w.jobs:
      if job.unit is not None:
        offset, count, _ = job.unit
        for i in job.indices[offset:offset + count]:
          if job.pending.raw[i] is None:
            job.pending.put(i, verdicts_lib.failure(
                kind, f"worker {w.proc.pid} {w.dead} while verifying"))
      rest = [i for i in job.indices if job.pending.raw[i] is None]
      if rest:
        self._assign(_Job(job.pending, rest, job.domain), new)
    return new


class PendingRewards:
  """A reward computation in flight."""

  def __init__(self, pool: RewardPool, tasks: list[Task], completions: list[str]):
    self.pool, self.tasks, self.completions = pool, tasks, completions
    self.raw: list[dict | None] = [None] * len(tasks)
    self.remaining = len(tasks)

  def put(self, i: int, raw: dict):
    if self.raw[i] is None:
      self.remaining -= 1
    self.raw[i] = raw

  def result(self) -> RewardBatch:
    while self.remaining:
      self.pool._pump()
    checked = [verdicts_lib.checked(r) for r in self.raw]
    batch = combine(self.tasks, [v for v, _ in checked], [k for _, k in checked],
                    self.pool.config)
    for kind, count in batch.error_counts.items():
      self.pool.error_counts[kind] += count
    return batch
