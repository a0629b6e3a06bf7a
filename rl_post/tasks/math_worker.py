"""math-verify in a child process, under a time limit we enforce ourselves.

math-verify's own timeout uses `signal.alarm`, which only works on a
process's main thread; verifiers also run on other threads, so it is
disabled (`parsing_timeout=None`, `timeout_seconds=None`) and each check
runs instead in a persistent child process that is killed and replaced
when a check overruns. A hostile answer (a power tower, a huge factorial)
then costs at most the time limit, and only its own task scores zero.

Protocol: one JSON object per line each way. The child prints "ready" once
its imports are done, so start-up never counts against a check's limit.
"""

import functools
import json
import os
import select
import subprocess
import sys
import threading
import time

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CheckTimeout(Exception):
  """The check did not finish within its time limit (the child was replaced)."""


def _as_latex(text: str) -> str:
  return text if "$" in text else f"${text}$"


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str):
  from math_verify import parse
  return parse(_as_latex(gold), parsing_timeout=None)


def check(gold: str, answer: str) -> bool:
  """math-verify equivalence of two LaTeX answers, without any timeout (child side)."""
  from math_verify import parse, verify
  predicted = parse(_as_latex(answer), parsing_timeout=None)
  if not predicted:
    return False
  return bool(verify(_parse_gold(gold), predicted, timeout_seconds=None))


def serve():
  """The child's loop: a request per stdin line, a response per stdout line."""
  import logging
  logging.disable(logging.WARNING)  # math-verify warns once that its timeout is off
  import math_verify  # noqa: F401  (import before announcing readiness)
  sys.stdout.write("ready\n")
  sys.stdout.flush()
  for line in sys.stdin:
    request = json.loads(line)
    try:
      response = {"equal": check(request["gold"], request["answer"]), "error": None}
    except Exception as e:  # a parse failure is a wrong answer, reported, never fatal
      response = {"equal": False, "error": f"{type(e).__name__}: {e}"[:200]}
    sys.stdout.write(json.dumps(response) + "\n")
    sys.stdout.flush()


class MathChecker:
  """Client side: one child per instance, started lazily, replaced after a timeout.

  Thread-safe (one check at a time per instance).
  """

  def __init__(self, timeout_s: float = 5.0, startup_timeout_s: float = 120.0):
    if not timeout_s > 0:
      raise ValueError(f"MathChecker: timeout_s must be > 0, got {timeout_s!r}")
    self.timeout_s = timeout_s
    self.startup_timeout_s = startup_timeout_s
    self.timeouts = 0
    self._child = None
    self._buffer = b""
    self._lock = threading.Lock()

  def _start(self):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    self._child = subprocess.Popen(
        [sys.executable, "-c", "from rl_post.tasks.math_worker import serve; serve()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    self._buffer = b""
    if self._read_line(time.monotonic() + self.startup_timeout_s) != "ready":
      self.close()
      raise RuntimeError("math-verify child did not start")

  def _read_line(self, deadline: float) -> str | None:
    """The next line from the child, or None at the deadline or on its exit."""
    fd = self._child.stdout.fileno()
    while b"\n" not in self._buffer:
      left = deadline - time.monotonic()
      if left <= 0 or not select.select([fd], [], [], left)[0]:
        return None
      chunk = os.read(fd, 65536)
      if not chunk:
        return None
      self._buffer += chunk
    line, _, self._buffer = self._buffer.partition(b"\n")
    return line.decode()

  def close(self):
    if self._child is not None:
      self._child.kill()
      self._child.wait()
      for stream in (self._child.stdin, self._child.stdout):
        stream.close()
      self._child = None

  def __del__(self):
    try:
      self.close()
    except Exception:  # interpreter shutdown
      pass

  def equal(self, gold: str, answer: str) -> tuple[bool, str | None]:
    """(equivalent, error); raises CheckTimeout when the check overran."""
    with self._lock:
      if self._child is None or self._child.poll() is not None:
        self._start()
      request = json.dumps({"gold": gold, "answer": answer}) + "\n"
      try:
        self._child.stdin.write(request.encode())
        self._child.stdin.flush()
      except BrokenPipeError:
        self.close()
        return False, "math-verify child exited"
      line = self._read_line(time.monotonic() + self.timeout_s)
      if line is None:
        self.close()
        self.timeouts += 1
        raise CheckTimeout(f"math-verify took longer than {self.timeout_s}s")
      response = json.loads(line)
      return response["equal"], response["error"]
