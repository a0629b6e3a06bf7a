"""A reward worker process: `python -m rl_post.rewards.worker`.

Protocol (length-prefixed pickles on the worker's original stdin/stdout;
fd 1 is pointed at stderr so verifier prints cannot corrupt it):
  pool -> worker: ("init", SandboxConfig)
                  ("job", job_id, domain_name, options, tasks, completions)
  worker -> pool: ("ready", pid, time.monotonic() when ready: CLOCK_MONOTONIC,
                   the pool's clock too)
                  ("start", job_id, offset, count)     a unit of work begins
                  ("result", job_id, offset, [raw result dict] * count,
                   (offset, count) of the unit that starts now, or None)
                  ("done", job_id)
                  ("bad_job", detail)   the oldest job could not be unpickled
Each job opens with a unit over all its items that covers building the
domain (once per worker; later jobs find it cached).

The worker dies with its parent: PR_SET_PDEATHSIG(SIGKILL), plus a
watchdog, the thread that reads the request pipe, which exits the process
when the pipe closes (the parent exited or was killed).
"""

import ctypes
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import time

PARENT_PID_ENV = "RL_POST_REWARD_PARENT_PID"
_HEADER = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1


def encode(message) -> bytes:
  payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
  return _HEADER.pack(len(payload)) + payload


def split_frames(buffer: bytearray) -> list[bytes]:
  """Removes every complete frame from `buffer`; returns their payloads."""
  out = []
  while len(buffer) >= _HEADER.size:
    (size,) = _HEADER.unpack_from(buffer)
    if len(buffer) < _HEADER.size + size:
      break
    out.append(bytes(buffer[_HEADER.size:_HEADER.size + size]))
    del buffer[:_HEADER.size + size]
  return out


def decode_frames(buffer: bytearray) -> list:
  """Removes every complete frame from `buffer`; returns the messages."""
  return [pickle.loads(payload) for payload in split_frames(buffer)]


def _write_all(fd: int, data: bytes):
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]


def _die_with_parent(parent_pid: int):
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
  if os.getppid() != parent_pid:  # the parent died before prctl took effect
    os._exit(1)


_VERIFIERS = []  # the LocalVerifier, once built, so shutdown can close its sandbox


def _shutdown():
  """Closes the sandbox (its temporary files) within 5 s, then exits."""
  threading.Timer(5.0, os._exit, (0,)).start()
  for verifier in _VERIFIERS:
    try:
      verifier.close()
    except Exception:  # exiting anyway; the pool removes the worker's TMPDIR
      pass
  os._exit(0)


def _read_requests(fd: int, requests: queue.Queue):
  """Watchdog and reader: end of the pipe means the pool closed or died.

  Only splits frames: unpickling (which may import modules) happens in the
  main thread, so the two threads never race on imports.
  """
  try:
    buffer = bytearray()
    while chunk := os.read(fd, 1 << 20):
      buffer += chunk
      for payload in split_frames(buffer):
        requests.put(payload)
  except BaseException:  # a dead reader would leave the worker deaf: exit, be replaced
    import traceback
    traceback.print_exc()
    os._exit(1)
  _shutdown()


def _send(fd: int, message):
  try:
    data = encode(message)
  except Exception as e:  # an unpicklable verdict field: that unit's results are invalid
    from rl_post.rewards.verdicts import failure
    kind, job_id, offset, results, next_unit = message
    data = encode((kind, job_id, offset, [failure("invalid_verdict", f"unpicklable result: {e!r}")]
                   * len(results), next_unit))
  _write_all(fd, data)


def _serve(requests: queue.Queue, out_fd: int):
  from rl_post.rewards import verdicts as verdicts_lib
  from rl_post.rewards.local import LocalVerifier
  _, sandbox_config = pickle.loads(requests.get())
  verifier = LocalVerifier(sandbox_config)
  _VERIFIERS.append(verifier)
  _send(out_fd, ("ready", os.getpid(), time.monotonic()))
  while True:
    try:
      _, job_id, name, options, tasks, completions = pickle.loads(requests.get())
    except Exception as e:  # e.g. task metadata of a type this process cannot import
      _send(out_fd, ("bad_job", f"cannot read the job here: {type(e).__name__}: {e}"))
      continue
    n = len(tasks)
    _send(out_fd, ("start", job_id, 0, n))
    try:
      domain = verifier.domain(name, options)
    except Exception as e:  # a domain that cannot be built fails its items, counted
      _send(out_fd, ("result", job_id, 0, [verdicts_lib.exception_failure(e)] * n))
      _send(out_fd, ("done", job_id))
      continue
    units = verdicts_lib.units(domain, n)
    _send(out_fd, ("start", job_id) + units[0])
    for k, (offset, count) in enumerate(units):
      results = verdicts_lib.verify_unit(domain, tasks[offset:offset + count],
                                         completions[offset:offset + count], verifier.sandbox)
      next_unit = units[k + 1] if k + 1 < len(units) else None
      _send(out_fd, ("result", job_id, offset, results, next_unit))
    _send(out_fd, ("done", job_id))


def main():
  in_fd, out_fd = os.dup(0), os.dup(1)  # private protocol fds (not inherited)
  devnull = os.open(os.devnull, os.O_RDONLY)
  os.dup2(devnull, 0)
  os.dup2(2, 1)
  sys.stdout = sys.stderr
  _die_with_parent(int(os.environ[PARENT_PID_ENV]))
  requests = queue.Queue()
  threading.Thread(target=_read_requests, args=(in_fd, requests), daemon=True,
                   name="parent-watchdog").start()
  _serve(requests, out_fd)


if __name__ == "__main__":
  main()
