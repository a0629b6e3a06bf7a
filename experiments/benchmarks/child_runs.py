"""What the memory benchmarks share: an entry point run in a child process, its
metrics and its peak RSS, and the result written as JSON beside a printed table.

The peak RSS is the kernel's (`os.wait4`, what `/usr/bin/time -v` reports). A
child started by vfork and exec begins that count at its parent's high-water
mark; the benchmarks that call this never load JAX, so their own mark stays far
below the child's. The child runs without a persistent compilation cache: every
program compiles, as on a user's first run.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_entry_point(argv: list[str], workdir: str) -> dict:
  """`python <argv>` from the repository root; its metrics.jsonl rows with a "loss"
  (the training steps), process wall-clock and peak RSS. Raises with the child's
  stderr tail if it fails."""
  cmd = [sys.executable] + argv
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  env["RL_POST_COMPILE_CACHE"] = ""  # no persistent cache (rl_post.training.compile_cache)
  start = time.perf_counter()
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env)
  stderr = proc.stderr.read()
  _, status, usage = os.wait4(proc.pid, 0)
  wall_s = time.perf_counter() - start
  if os.waitstatus_to_exitcode(status) != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr[-3000:]}")
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    steps = [m for m in map(json.loads, f) if "loss" in m]
  return dict(metrics=steps, wall_s=wall_s, peak_rss_gib=usage.ru_maxrss * 1024 / 2**30)


def write_result(path: str, result: dict, table: str) -> dict:
  """Prints `table` and the CPU line, writes `result` (which holds "cpu") to `path`."""
  print(table)
  print(f"CPU: {result['cpu']['model_name']} ({result['cpu']['cpus']} CPUs)")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
  return result
