"""The strict pool of two checkouts, measured interleaved (before/after).

  git worktree add /tmp/before <commit>
  python experiments/benchmarks/sandbox_ab.py --before=/tmp/before \
      --after=. --repeats=3 --output=/tmp/rl_post_sandbox_ab.json

Each repeat runs, for every concurrency, `--runs` trivial executions on the
`before` checkout's pool and then on the `after` one, each in a fresh
process with that checkout first on PYTHONPATH, so load drifts on a shared
machine hit both alike. Prints per-repeat lines and a table of medians
(throughput, p50/p99 latency, whole-machine CPU per execution), writes JSON.
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

_BEFORE = flags.DEFINE_string("before", None, "Checkout to compare against.")
_AFTER = flags.DEFINE_string("after", ".", "Checkout under test.")
_RUNS = flags.DEFINE_integer("runs", 300, "Executions per measurement.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Interleaved repeats.")
_CONCURRENCY = flags.DEFINE_list("concurrency", ["1", "2"], "Concurrencies.")
_OUTPUT = flags.DEFINE_string("output", "/tmp/rl_post_sandbox_ab.json",
                              "Where to write the JSON results.")

# Runs in a fresh interpreter with one checkout first on sys.path.
_PROBE = r'''
import concurrent.futures, json, os, sys, time
sys.path.insert(0, sys.argv[3])
import machine_cpu
from rl_post.sandbox import Sandbox, SandboxConfig
conc, runs = int(sys.argv[1]), int(sys.argv[2])

with Sandbox(SandboxConfig(num_workers=conc,
                           max_runs_per_worker=10 * runs)) as sb:
  sb.run_many(["print(1)"] * (5 * conc))
  lat = []
  def one(_):
    t = time.perf_counter()
    ok = sb.run("print(1)").status == "ok"
    lat.append(time.perf_counter() - t)
    return ok
  with concurrent.futures.ThreadPoolExecutor(conc) as ex:
    c0, t0 = machine_cpu.busy_s(), time.monotonic()
    ok = sum(ex.map(one, range(runs)))
    wall, cpu = time.monotonic() - t0, machine_cpu.busy_s() - c0
lat.sort()
print(json.dumps({"execs_per_s": runs / wall, "ok": ok, "runs": runs,
                  "p50_ms": 1e3 * lat[len(lat) // 2],
                  "p99_ms": 1e3 * lat[min(len(lat) - 1, len(lat) * 99 // 100)],
                  "machine_cpu_ms_per_exec": 1e3 * cpu / runs}))
'''


def _measure(checkout, conc, runs):
  path = os.path.abspath(checkout)
  # `-c` puts the working directory first on sys.path: run in the checkout.
  probe = f"import rl_post; assert rl_post.__file__.startswith({path!r})\n"
  proc = subprocess.run(
      [sys.executable, "-c", probe + _PROBE, str(conc), str(runs),
       os.path.dirname(os.path.abspath(__file__))],
      capture_output=True, text=True, cwd=path, check=False,
      env=dict(os.environ, PYTHONPATH=path))
  if proc.returncode != 0:
    raise RuntimeError(f"{checkout}: {proc.stderr[-2000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(values):
  return sorted(values)[len(values) // 2]


def main(argv):
  del argv
  if not _BEFORE.value:
    raise app.UsageError("--before=<checkout> is required")
  checkouts = {"before": _BEFORE.value, "after": _AFTER.value}
  samples = {}
  for rep in range(_REPEATS.value):
    for conc in (int(c) for c in _CONCURRENCY.value):
      for name, path in checkouts.items():
        row = _measure(path, conc, _RUNS.value)
        samples.setdefault((name, conc), []).append(row)
        print(f"[{rep + 1}/{_REPEATS.value}] {name:6s} c={conc} "
              f"{row['execs_per_s']:7.1f}/s p50 {row['p50_ms']:5.1f}ms "
              f"p99 {row['p99_ms']:5.1f}ms machine CPU "
              f"{row['machine_cpu_ms_per_exec']:.1f}ms "
              f"ok {row['ok']}/{row['runs']}", flush=True)
  keys = ("execs_per_s", "p50_ms", "p99_ms", "machine_cpu_ms_per_exec")
  rows = [{"checkout": name, "path": checkouts[name], "concurrency": conc,
           **{k: _median([r[k] for r in reps]) for k in keys}}
          for (name, conc), reps in samples.items()]
  print(f"\nmedian of {_REPEATS.value} interleaved repeats, trivial snippet")
  print("| checkout | concurrency | execs/s | p50 ms | p99 ms "
        "| machine CPU ms/exec |\n|---|---|---|---|---|---|")
  for r in sorted(rows, key=lambda r: (r["concurrency"], r["checkout"] != "before")):
    print(f"| {r['checkout']} | {r['concurrency']} | {r['execs_per_s']:.1f} | "
          f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
          f"{r['machine_cpu_ms_per_exec']:.1f} |")
  meta = {"checkouts": checkouts, "runs": _RUNS.value,
          "repeats": _REPEATS.value, "load_avg": os.getloadavg(),
          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  with open(_OUTPUT.value, "w") as f:
    json.dump({"meta": meta, "rows": rows,
               "samples": {f"{k[0]}/c{k[1]}": v for k, v in samples.items()}},
              f, indent=1)
  print(f"\nwrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
