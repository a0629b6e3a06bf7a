"""Thread-safe counters for a Sandbox: statuses, recycles, latencies."""

import collections
import threading

from rl_post.sandbox import result as result_lib


class SandboxStats:
  """Counts every run by status (sandbox errors included) and latency."""

  def __init__(self, window=10000):
    self._lock = threading.Lock()
    self._status = collections.Counter({s: 0 for s in result_lib.STATUSES})
    self._latency = collections.deque(maxlen=window)
    self._recycles = collections.Counter()
    self._messages = collections.deque(maxlen=20)

  def record(self, res, latency_s):
    with self._lock:
      self._status[res.status] += 1
      self._latency.append(latency_s)
      if res.status == "sandbox_error":
        self._messages.append(res.message)

  def recycled(self, reason):
    with self._lock:
      self._recycles[reason] += 1

  def snapshot(self):
    with self._lock:
      lat = sorted(self._latency)
      out = {
          "runs": sum(self._status.values()),
          "status": dict(self._status),
          "recycles": sum(self._recycles.values()),
          "recycle_reasons": dict(self._recycles),
          "recent_sandbox_errors": list(self._messages),
      }
    for q in (50, 90, 99):
      key = f"latency_p{q}_s"
      out[key] = lat[min(len(lat) - 1, len(lat) * q // 100)] if lat else None
    return out
