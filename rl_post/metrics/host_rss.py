"""This process's resident memory, read from /proc/self/status (Linux; stdlib only).

  host_rss.metrics("rollout_") -> {"host/rollout_rss_gib": ..., "host/rollout_peak_rss_gib": ...}

`rss` is the resident set when read (VmRSS); `peak` the kernel's high-water
mark since the process started (VmHWM: the max RSS that `/usr/bin/time -v`
and `getrusage` report). The RL trainer reads both after its setup, after
each step's rollout and after each update, so metrics.jsonl shows which phase
raised the peak. On XLA:CPU the device's buffers are host memory and count
here, beside what no compiled program holds: the runtime and its libraries,
compiled code, Python objects and the free memory the allocator keeps
(rl_post.training.host_memory). Where /proc is missing, no metrics.
"""

GIB = 2**30
STATUS = "/proc/self/status"
_FIELDS = {"VmRSS": "rss", "VmHWM": "peak"}


def parse_status(text: str) -> dict:
  """{"rss": bytes, "peak": bytes} from /proc/<pid>/status text (kB fields)."""
  out = {}
  for line in text.splitlines():
    key, _, value = line.partition(":")
    if key in _FIELDS and value.split():
      out[_FIELDS[key]] = int(value.split()[0]) * 1024
  return out


def read(path: str = STATUS) -> dict:
  """This process's {"rss", "peak"} in bytes; {} where `path` cannot be read."""
  try:
    with open(path) as f:
      return parse_status(f.read())
  except OSError:
    return {}


def metrics(phase: str = "", path: str = STATUS) -> dict:
  """{"host/<phase>rss_gib", "host/<phase>peak_rss_gib"}, or {} without /proc."""
  status = read(path)
  names = {"rss": f"host/{phase}rss_gib", "peak": f"host/{phase}peak_rss_gib"}
  return {names[k]: v / GIB for k, v in status.items()}
