"""The sandbox benchmark and its cost-floor probe run end to end (tiny)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "experiments", "benchmarks")


def test_floor_probe_measures_every_primitive():
  from experiments.benchmarks import sandbox_floor  # pylint: disable=g-import-not-at-top
  floor = sandbox_floor.measure(ops=5, snippets={"x": "print(2)"})
  assert len(floor) == 4 and "fork + run the x snippet + exit" in floor
  for v in floor.values():
    assert v["cpu_ms"] >= 0 and v["wall_ms"] > 0
  assert sandbox_floor.strict_floor_ms(floor) >= 0
  assert sandbox_floor.strict_floor_ms(floor, "x") >= 0


def test_benchmark_writes_a_complete_table(tmp_path):
  out = tmp_path / "bench.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(BENCH, "sandbox.py"), "--runs=3",
       "--baseline_runs=2", "--repeats=1", "--floor_ops=3",
       "--concurrency=1", f"--output={out}"],
      capture_output=True, text=True, check=False, timeout=300,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  cells = {(r["system"], r["snippet"]) for r in result["rows"]}
  assert len(cells) == 8  # 4 systems x 2 snippets
  assert all(r["ok"] == r["runs"] for r in result["rows"]), result["rows"]
  assert set(result["speedups"]) == {"trivial/c1", "humaneval/c1"}
  assert "| strict pool | trivial | 1 |" in proc.stdout
  for s in result["speedups"].values():
    assert s["strict_floor_ms"] > 0 and s["cpu_budget_for_10x_ms"] > 0
