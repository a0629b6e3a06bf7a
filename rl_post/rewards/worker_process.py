"""The pool's handle on one reward worker process (see pool.py, worker.py).

    w = WorkerProcess(env, sandbox_config, tmp_root)   # spawned, not yet ready
    w.outbox += worker.encode(message); w.flush()      # non-blocking send
    messages, eof = w.read()                           # non-blocking receive
    w.kill()                                           # the worker and its sandbox

The worker runs in its own session, so `kill` signals its process group;
its sandbox's processes run in sessions of their own (and a run in
progress outlives its zygote's closed pipe until the sandbox's timeout),
so `kill` also kills every descendant it finds in /proc first.
"""

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from rl_post.rewards import worker as worker_lib


def worker_env() -> dict:
  """This process's environment for a worker: same imports, CPU only."""
  env = dict(os.environ)
  env[worker_lib.PARENT_PID_ENV] = str(os.getpid())
  env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # same imports as here
  env["JAX_PLATFORMS"] = "cpu"  # verifiers never take an accelerator
  env["CUDA_VISIBLE_DEVICES"] = ""
  return env


def descendants(pid: int) -> list[int]:
  """Every living process below `pid` in the process tree (from /proc)."""
  parent = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat") as f:
          parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
      except (OSError, IndexError, ValueError):  # exited meanwhile
        pass
  found, frontier = [], {pid}
  while frontier:
    frontier = {p for p, pp in parent.items() if pp in frontier}
    found += sorted(frontier)
  return found


class WorkerProcess:
  """One worker process and its queue of jobs (the first is in progress).

  Attributes:
    jobs: the pool's jobs sent to it, in the order it works on them.
    ready: it has sent "ready".
    startup: [spawned, ready or None], time.monotonic().
    dead: why it is being replaced, or None.
  """

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
    self.jobs: collections.deque = collections.deque()
    self.ready = False
    self.started = time.monotonic()
    self.startup = [self.started, None]
    self.dead: str | None = None

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
    asks it to stop; it closes its sandbox), else at once with every process
    below it; then removes its temporary files."""
    try:
      self.proc.stdin.close()
    except OSError:
      pass
    try:
      self.proc.wait(grace_s)
    except subprocess.TimeoutExpired:
      pass
    # while it lives (its pid cannot be reused), before they are orphaned and lost from the tree
    below = descendants(self.proc.pid) if self.proc.returncode is None else []
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)  # also any children in its group
    except (ProcessLookupError, PermissionError):
      pass
    for pid in below:  # its sandbox's zygotes and runs, each in a session of its own
      try:
        os.kill(pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    self.proc.wait()
    self.proc.stdout.close()
    shutil.rmtree(self.tmp, ignore_errors=True)

  def pending_items(self) -> int:
    return sum(len(j.indices) for j in self.jobs)
