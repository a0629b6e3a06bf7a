"""ExecResult, and how a worker's raw report becomes one status."""

import dataclasses
import os
import signal
from typing import Mapping, Optional, Tuple

STATUSES = ("ok", "error", "timeout", "memory", "output_limit",
            "sandbox_error")


@dataclasses.dataclass(frozen=True)
class ExecResult:
  """The outcome of one run.

  Attributes:
    status: one of STATUSES. "ok" means the candidate's main process exited
      with code 0; it says nothing about correctness (see grading.py).
    returncode: exit code, or -signal if killed; None if it never ran.
    stdout, stderr: decoded UTF-8 (invalid bytes replaced), capped.
    wall_s: wall time of the run inside the worker (fork to last reap).
    files: regular files in the work dir after the run, name -> bytes.
    stdout_bytes, stderr_bytes: the raw capped bytes.
    files_omitted: names not returned (not regular files or over the caps).
    message: why, for "sandbox_error" (and notes for other statuses).
  """
  status: str
  returncode: Optional[int]
  stdout: str
  stderr: str
  wall_s: float
  files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
  stdout_bytes: bytes = b""
  stderr_bytes: bytes = b""
  files_omitted: Tuple[str, ...] = ()
  message: str = ""

  @property
  def ok(self):
    return self.status == "ok"


def sandbox_error(message, wall_s=0.0):
  return ExecResult(status="sandbox_error", returncode=None, stdout="",
                    stderr="", wall_s=wall_s, message=message)


def _returncode(wait_status):
  if wait_status is None:
    return -signal.SIGKILL
  if os.WIFEXITED(wait_status):
    return os.WEXITSTATUS(wait_status)
  if os.WIFSIGNALED(wait_status):
    return -os.WTERMSIG(wait_status)
  return None


def from_report(report, oom_killed=False):
  """Turns the zygote's untrusted report into an ExecResult.

  Precedence: a sandbox failure, then the limits the supervisor enforced
  (timeout, output), then memory (cgroup OOM kill or MemoryError), then
  the candidate's own exit status.
  """
  def get(key, kind, default):
    value = report.get(key, default)
    return value if isinstance(value, kind) else default

  stdout_b = get("stdout", bytes, b"")
  stderr_b = get("stderr", bytes, b"")
  wall = float(get("wall_s", (int, float), 0.0))
  files = get("files", dict, {})
  files = {k: v for k, v in files.items()
           if isinstance(k, str) and isinstance(v, bytes)}
  omitted = tuple(n for n in get("files_omitted", list, [])
                  if isinstance(n, str))
  flag = get("flag", str, "")
  setup_error = get("setup_error", str, "")
  error = report.get("error")
  wait_status = report.get("wait_status")
  if not isinstance(wait_status, int) or isinstance(wait_status, bool):
    wait_status = None
  rc = _returncode(wait_status)
  message = ""
  if error or setup_error:
    status, rc = "sandbox_error", None
    message = str(error or ("candidate setup failed: " + setup_error))
  elif report.get("timed_out") is True or rc == -signal.SIGXCPU:
    status = "timeout"
  elif report.get("output_limit") is True:
    status = "output_limit"
  elif oom_killed or flag.startswith("M"):
    status = "memory"
  elif rc == 0:
    status = "ok"
  else:
    status = "error"
  return ExecResult(
      status=status, returncode=rc,
      stdout=stdout_b.decode("utf-8", "replace"),
      stderr=stderr_b.decode("utf-8", "replace"), wall_s=wall, files=files,
      stdout_bytes=stdout_b, stderr_bytes=stderr_b, files_omitted=omitted,
      message=message)
