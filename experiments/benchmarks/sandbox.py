"""Sandbox throughput and latency vs. per-execution baselines.

  python experiments/benchmarks/sandbox.py --runs=200 --repeats=3 \
      --output=/tmp/rl_post_sandbox_bench.json

For a trivial snippet and a HumanEval-sized program, at concurrency 1 and 2,
measures executions/s, p50/p99 latency and CPU per execution of: our strict
pool, our process pool, `subprocess.run([python, "-c", code])`, and one
bubblewrap invocation per execution (same minimal root, no pool). Every
cell is measured --repeats times, interleaved so that load drifts on a
shared machine hit all systems alike, and the table reports medians.
"Machine CPU" is whole-machine busy time per execution (kernel work on
other threads, such as namespace teardown, included); on 2 cores it bounds
throughput at full load. The run ends with the cost floor of a strict run
(sandbox_floor.py). Prints tables, writes JSON. Run as root, like CI, so
workers drop to an unprivileged uid and cgroups are used.
"""

import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from experiments.benchmarks import machine_cpu  # noqa: E402
from experiments.benchmarks import sandbox_floor  # noqa: E402
from rl_post.sandbox import Sandbox, SandboxConfig  # noqa: E402
from rl_post.sandbox import launcher  # noqa: E402

_RUNS = flags.DEFINE_integer("runs", 200, "Executions per (system, snippet, "
                             "concurrency) for the pools.")
_BASELINE_RUNS = flags.DEFINE_integer("baseline_runs", 60, "Executions per "
                                      "cell for the per-execution baselines.")
_CONCURRENCY = flags.DEFINE_list("concurrency", ["1", "2"], "Concurrencies.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Interleaved repeats of every "
                                "cell; the table reports medians.")
_FLOOR_OPS = flags.DEFINE_integer("floor_ops", 200, "Operations per "
                                  "primitive for the cost floor.")
_OUTPUT = flags.DEFINE_string("output", "/tmp/rl_post_sandbox_bench.json",
                              "Where to write the JSON results.")

TRIVIAL = "print(1)"
HUMANEVAL = '''
from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """Check if in given list of numbers, are any two numbers closer to each
    other than given threshold."""
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                distance = abs(elem - elem2)
                if distance < threshold:
                    return True
    return False


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False
    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) == False


check(has_close_elements)
print("ok")
'''
SNIPPETS = {"trivial": TRIVIAL, "humaneval": HUMANEVAL}


_TICK = os.sysconf("SC_CLK_TCK")
_CPUS = len(os.sched_getaffinity(0))


def _proc_cpu_s(pid):
  """utime + stime + cutime + cstime of one process (waited-for children)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()
  except OSError:
    return 0.0
  return sum(int(x) for x in fields[11:15]) / _TICK


def _cpu_meter(sb, system):
  """CPU seconds used so far by the executions (load-independent cost).

  None for bwrap per execution: the sandboxed python is reaped inside
  bubblewrap's pid namespace, so its CPU never reaches our rusage.
  """
  if system == "bwrap per exec":
    return None
  if sb is None:  # subprocess baseline: our reaped children
    return lambda: (lambda t: t.children_user + t.children_system)(os.times())
  pids = set()
  for w in sb._workers:  # pylint: disable=protected-access
    pids |= w.cgroup.pids() if w.cgroup is not None else {w.proc.pid}
  return lambda: sum(_proc_cpu_s(p) for p in pids)


def _measure(fn, code, runs, concurrency, cpu_now):
  """Runs fn(code) `runs` times on `concurrency` threads; returns stats."""
  latencies = []

  def one(_):
    t0 = time.perf_counter()
    ok = fn(code)
    latencies.append(time.perf_counter() - t0)
    return ok

  for _ in range(min(5, runs)):  # warm-up, not measured
    fn(code)
  latencies.clear()
  cpu0 = cpu_now() if cpu_now else 0.0
  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
    oks = list(pool.map(one, range(runs)))
  total = time.perf_counter() - t0
  cpu = cpu_now() - cpu0 if cpu_now else None
  lat = sorted(latencies)
  return {"runs": runs, "ok": sum(oks), "execs_per_s": runs / total,
          "cpu_ms_per_exec": 1e3 * cpu / runs if cpu is not None else None,
          "p50_ms": 1e3 * lat[len(lat) // 2],
          "p99_ms": 1e3 * lat[min(len(lat) - 1, (len(lat) * 99) // 100)]}


def _pool_fn(sb):
  return lambda code: sb.run(code).status == "ok"


def _subprocess_fn(python):
  def fn(code):
    return subprocess.run([python, "-c", code], capture_output=True,
                          check=False).returncode == 0
  return fn


def _bwrap_fn(config):
  prefix = (launcher._uid_drop(config)  # pylint: disable=protected-access
            + launcher.strict_argv(config, "/nonexistent"))
  # Same minimal root as a strict worker; run the code instead of a zygote.
  cut = prefix.index(config.python_executable)
  i = prefix.index("/nonexistent")
  prefix = prefix[:i - 1] + prefix[i + 2:cut]  # drop the zygote's code bind

  def fn(code):
    argv = prefix + [config.python_executable, "-c", code]
    return subprocess.run(argv, capture_output=True, check=False,
                          env={"PATH": "/usr/bin:/bin"}).returncode == 0
  return fn


def _fmt(value):
  return "n/a" if value is None else f"{value:.1f}"


def _median(values):
  values = sorted(values)
  return values[len(values) // 2]


def _cells(concurrencies):
  """(system, isolation, concurrency) in the order each repeat runs them."""
  systems = [("strict pool", "strict"), ("process pool", "process"),
             ("subprocess.run", None), ("bwrap per exec", None)]
  return [(name, iso, c) for c in concurrencies for name, iso in systems]


def _run_cell(name, isolation, conc, base):
  """One measurement of every snippet for one system at one concurrency."""
  sb = None
  if isolation is not None:
    sb = Sandbox(SandboxConfig(isolation=isolation, num_workers=conc))
    fn, runs = _pool_fn(sb), _RUNS.value
  elif name == "subprocess.run":
    fn, runs = _subprocess_fn(base.python_executable), _BASELINE_RUNS.value
  else:
    fn, runs = _bwrap_fn(base), _BASELINE_RUNS.value
  out = {}
  try:
    for snippet, code in SNIPPETS.items():
      m0 = machine_cpu.busy_s()
      row = _measure(fn, code, runs, conc, _cpu_meter(sb, name))
      row["machine_cpu_ms_per_exec"] = 1e3 * (machine_cpu.busy_s() - m0) / runs
      out[snippet] = row
  finally:
    if sb is not None:
      sb.close()
  return out


def _summarise(samples):
  """Median over repeats of each figure; latencies from the median repeat."""
  by_rate = sorted(samples, key=lambda r: r["execs_per_s"])
  mid = by_rate[len(by_rate) // 2]
  row = {k: mid[k] for k in ("p50_ms", "p99_ms")}
  for key in ("execs_per_s", "cpu_ms_per_exec", "machine_cpu_ms_per_exec"):
    vals = [r[key] for r in samples if r[key] is not None]
    row[key] = _median(vals) if vals else None
  row["runs"] = sum(r["runs"] for r in samples)
  row["ok"] = sum(r["ok"] for r in samples)
  row["execs_per_s_all"] = [r["execs_per_s"] for r in samples]
  return row


def main(argv):
  del argv
  concurrencies = [int(c) for c in _CONCURRENCY.value]
  base = SandboxConfig()
  samples = {}
  for rep in range(_REPEATS.value):  # interleaved: load drifts hit all alike
    for name, isolation, conc in _cells(concurrencies):
      for snippet, row in _run_cell(name, isolation, conc, base).items():
        samples.setdefault((name, snippet, conc), []).append(row)
        print(f"[{rep + 1}/{_REPEATS.value}] {name:15s} {snippet:9s} c={conc} "
              f"{row['execs_per_s']:8.1f}/s p50 {row['p50_ms']:7.1f}ms "
              f"p99 {row['p99_ms']:7.1f}ms machine CPU "
              f"{row['machine_cpu_ms_per_exec']:.1f}ms "
              f"ok {row['ok']}/{row['runs']}", flush=True)
  rows = []
  for (name, snippet, conc), reps in samples.items():
    rows.append({"system": name, "snippet": snippet, "concurrency": conc,
                 **_summarise(reps)})
  floor = sandbox_floor.measure(_FLOOR_OPS.value, base, SNIPPETS)
  floor_ms = sandbox_floor.strict_floor_ms(floor)
  speedups = {}
  for row in rows:
    if row["system"] != "strict pool":
      continue
    key = (row["snippet"], row["concurrency"])
    same = {r["system"]: r for r in rows
            if (r["snippet"], r["concurrency"]) == key}
    sub = same["subprocess.run"]
    speedups[f"{key[0]}/c{key[1]}"] = {
        "vs_subprocess": row["execs_per_s"] / sub["execs_per_s"],
        "vs_bwrap": row["execs_per_s"] / same["bwrap per exec"]["execs_per_s"],
        "machine_cpu_vs_subprocess": (sub["machine_cpu_ms_per_exec"] /
                                      row["machine_cpu_ms_per_exec"]),
        # 10x the baseline's rate on this machine's CPUs, at best fully busy
        "cpu_budget_for_10x_ms": (1e3 * _CPUS / (10 * sub["execs_per_s"])),
        "strict_floor_ms": sandbox_floor.strict_floor_ms(floor, key[0])}
  print(f"\nmedian of {_REPEATS.value} interleaved repeats; p50/p99 from the "
        "median repeat")
  print("| system | snippet | concurrency | execs/s | p50 ms | p99 ms "
        "| process CPU ms/exec | machine CPU ms/exec |\n"
        "|---|---|---|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['system']} | {r['snippet']} | {r['concurrency']} | "
          f"{r['execs_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
          f"{_fmt(r['cpu_ms_per_exec'])} | "
          f"{_fmt(r['machine_cpu_ms_per_exec'])} |")
  print("\nstrict pool speed-up (throughput):")
  for key, s in speedups.items():
    print(f"  {key}: {s['vs_subprocess']:.1f}x subprocess.run, "
          f"{s['vs_bwrap']:.1f}x bwrap per exec; machine CPU per exec "
          f"{s['machine_cpu_vs_subprocess']:.1f}x less than subprocess.run")
  print("\ncost floor of a strict run (sandbox_floor.py, machine CPU):")
  for name, v in floor.items():
    print(f"  {name}: {v['cpu_ms']:.2f} ms")
  print(f"  clone into namespaces + one fork: {floor_ms:.2f} ms")
  print(f"\n10x subprocess.run on {_CPUS} CPUs vs the floor of a strict run "
        "of the same snippet (machine CPU per execution):")
  for key, s in speedups.items():
    verdict = "below" if s["cpu_budget_for_10x_ms"] < s["strict_floor_ms"] else "above"
    print(f"  {key}: 10x allows {s['cpu_budget_for_10x_ms']:.2f} ms, "
          f"floor {s['strict_floor_ms']:.2f} ms ({verdict} the floor)")
  meta = {"machine": platform.platform(), "cpus": os.cpu_count(),
          "load_avg": os.getloadavg(), "uid": os.geteuid(),
          "repeats": _REPEATS.value,
          "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  with open(_OUTPUT.value, "w") as f:
    json.dump({"meta": meta, "rows": rows, "speedups": speedups,
               "floor": floor, "strict_floor_ms": floor_ms}, f, indent=1)
  print(f"\nwrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
