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

With `batch_timeout_s`, a batch also has a deadline, `batch_timeout_s`
after `submit` plus the time since then during which some worker was
starting (a replacement after a kill; start-up never eats a budget, and an
expired batch's restarts do not eat the next one's). Every pump enforces
the deadlines of all batches in flight, so a batch awaited late (async
rewards) is bounded by the same clock. Past it, the batch's
unverified completions become "timeout" errors
(`RewardBatch.deadline_timeouts`); results that arrived before keep their
scores; a worker inside a unit of it is killed and replaced like a unit
over budget (also one that reaches a queued job of it later).
"""

import atexit
import dataclasses
import os
import select
import shutil
import tempfile
import time
import weakref
from typing import Sequence

from rl_post.rewards import verdicts as verdicts_lib
from rl_post.rewards import worker as worker_lib
from rl_post.rewards.local import LocalVerifier, group_by_domain
from rl_post.rewards.scoring import ERROR_KINDS, RewardBatch, RewardConfig, combine
from rl_post.rewards.worker_process import WorkerProcess, worker_env
from rl_post.tasks.base import Task

MAX_STARTUP_FAILURES = 3  # in a row; then the environment is broken, not a verifier
PAST_BATCH_DEADLINE = "past its batch's deadline"  # why such a worker is replaced
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


class RewardPool:
  """Scores (task, completion) pairs; see the module docstring.

  Attributes:
    error_counts: kind -> completions failed so far, over the pool's life.
    deadline_timeouts: of those, timeouts that batch deadlines caused.
    replaced: workers replaced so far (crashes and timeouts).
  """

  def __init__(self, config: RewardConfig | None = None, domain_options=None):
    self.config = config or RewardConfig()
    self.domain_options = {k: dict(v) for k, v in (domain_options or {}).items()}
    self.error_counts = dict.fromkeys(ERROR_KINDS, 0)
    self.deadline_timeouts = 0
    self.replaced = 0
    self._in_flight: list[PendingRewards] = []  # batches with a deadline, not yet complete
    self._startups: list[list] = []  # [spawned, ready or None] of workers, for deadlines
    self._startup_failures = 0
    self._next_job = 0
    self._workers: list[WorkerProcess] = []
    self._local = None
    self.tmp_root = None
    if self.config.num_workers == 0:
      self._local = LocalVerifier(self.config.sandbox_config())
      return
    self._env = worker_env()
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
    if self._local is not None:  # in process: no deadline can interrupt it
      for i, raw in enumerate(self._local.verify_all(tasks, completions, self.domain_options)):
        pending.put(i, raw)
      return pending
    if self._workers is None:
      raise RuntimeError("RewardPool is closed")
    if self.config.batch_timeout_s and tasks:
      pending.submitted = time.monotonic()
      self._in_flight.append(pending)
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
  def _spawn(self) -> WorkerProcess:
    w = WorkerProcess(self._env, self.config.sandbox_config(), self.tmp_root)
    self._startups.append(w.startup)
    return w

  def _assign(self, job: _Job, worker: WorkerProcess | None = None):
    worker = worker or min(self._workers, key=WorkerProcess.pending_items)
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
    deadlines = [self._deadline(w) for w in self._workers] + [self._batch_deadline(p, now)
                                                              for p in self._in_flight]
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
    self._expire_batches(now)
    for w in self._workers:  # inside a unit of an expired batch: possibly hung, never needed
      if not w.dead and w.jobs and w.jobs[0].pending.expired and w.jobs[0].unit is not None:
        w.dead = PAST_BATCH_DEADLINE
    for i, w in enumerate(self._workers):
      if w.dead:
        self._workers[i] = self._replace(w)

  def _batch_deadline(self, p: "PendingRewards", now: float) -> float:
    return p.submitted + self.config.batch_timeout_s + starting_s(self._startups, p.submitted, now)

  def _expire_batches(self, now: float):
    """Fails what is left of every batch in flight whose deadline has passed."""
    live = []
    for p in self._in_flight:
      if p.remaining and now >= self._batch_deadline(p, now):
        p.expire(f"batch deadline ({self.config.batch_timeout_s} s) passed before it was verified")
      elif p.remaining:
        live.append(p)
    self._in_flight = live
    oldest = min([p.submitted for p in live], default=now)
    self._startups = [s for s in self._startups if s[1] is None or s[1] > oldest]

  def _deadline(self, w: WorkerProcess) -> float | None:
    if not w.ready:
      return w.started + self.config.startup_timeout_s
    if w.jobs and w.jobs[0].unit is not None:
      return w.jobs[0].unit[2]
    return None

  def _handle(self, w: WorkerProcess, message):
    kind = message[0]
    if kind == "ready":
      w.ready, self._startup_failures = True, 0
      w.startup[1] = min(message[2], time.monotonic())
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

  def _replace(self, w: WorkerProcess) -> WorkerProcess:
    """Kills `w`, fails the completions of its current unit, requeues the rest."""
    w.kill()
    if w.startup[1] is None:
      w.startup[1] = time.monotonic()
    self.replaced += 1
    if not w.ready:
      self._startup_failures += 1
      if self._startup_failures >= MAX_STARTUP_FAILURES:
        for job in w.jobs:
          for i in job.indices:
            job.pending.put(i, verdicts_lib.failure("crash", "reward workers cannot start"))
        raise RuntimeError(f"reward workers fail to start ({w.dead}) {MAX_STARTUP_FAILURES} "
                           "times in a row; see their stderr above")
    kind = "timeout" if w.dead in ("timeout", PAST_BATCH_DEADLINE) else "crash"
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


def starting_s(startups: Sequence[Sequence], since: float, now: float) -> float:
  """Seconds of [since, now] during which at least one worker was starting.

  startups: [spawned, ready] per worker, in time.monotonic(); ready None
  (still starting) counts up to `now`.
  """
  total, reach = 0.0, since
  for start, end in sorted(startups, key=lambda s: s[0]):
    end = now if end is None else min(end, now)
    start = max(start, reach)
    if end > start:
      total, reach = total + end - start, end
  return total


class PendingRewards:
  """A reward computation in flight."""

  def __init__(self, pool: RewardPool, tasks: list[Task], completions: list[str]):
    self.pool, self.tasks, self.completions = pool, tasks, completions
    self.raw: list[dict | None] = [None] * len(tasks)
    self.remaining = len(tasks)
    self.submitted: float | None = None  # time.monotonic(), where a batch deadline applies
    self.expired = False
    self.deadline_timeouts = 0

  def put(self, i: int, raw: dict):
    """The first result for item i counts (a late one after its deadline does not)."""
    if self.raw[i] is None:
      self.remaining -= 1
      self.raw[i] = raw

  def expire(self, detail: str):
    """Counts every item not yet verified as a timeout."""
    for i, raw in enumerate(self.raw):
      if raw is None:
        self.put(i, verdicts_lib.failure("timeout", detail))
        self.deadline_timeouts += 1
    self.expired = True

  def result(self) -> RewardBatch:
    while self.remaining:
      self.pool._pump()
    checked = [verdicts_lib.checked(r) for r in self.raw]
    batch = combine(self.tasks, [v for v, _ in checked], [k for _, k in checked],
                    self.pool.config, self.deadline_timeouts)
    for kind, count in batch.error_counts.items():
      self.pool.error_counts[kind] += count
    self.pool.deadline_timeouts += batch.deadline_timeouts
    return batch
