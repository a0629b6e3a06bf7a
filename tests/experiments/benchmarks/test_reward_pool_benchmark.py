"""The reward pool benchmark runs end to end at tiny size."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_benchmark_writes_every_row(tmp_path):
  out = tmp_path / "reward_pool.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "benchmarks", "reward_pool.py"),
       "--items=16", "--repeats=1", "--workers=1,2", f"--out={out}"],
      capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(out.read_text())["rows"]
  assert [r["workers"] for r in rows] == [0, 1, 2]
  assert all(r["errors"] == 0 and r["pass_rate"] == 0.5 and r["items_per_s"] > 0 for r in rows)
  assert "| pool, 2 workers |" in proc.stdout
