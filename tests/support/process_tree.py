"""Processes seen from /proc, for tests that check nothing is left running."""

import time

from rl_post.rewards import worker_process


def alive(pid: int) -> bool:
  """True while `pid` runs (a zombie has exited)."""
  try:
    with open(f"/proc/{pid}/status") as f:
      return "State:\tZ" not in f.read()
  except FileNotFoundError:
    return False


def descendants(pids) -> set[int]:
  """Every process below any of `pids` in the process tree (the library's /proc reader)."""
  return {d for pid in pids for d in worker_process.descendants(pid)}


def wait_gone(pids, timeout_s: float = 20.0) -> list[int]:
  """Waits up to `timeout_s` for `pids` to exit; returns those still alive."""
  end = time.monotonic() + timeout_s
  while any(alive(p) for p in pids) and time.monotonic() < end:
    time.sleep(0.1)
  return [p for p in pids if alive(p)]
