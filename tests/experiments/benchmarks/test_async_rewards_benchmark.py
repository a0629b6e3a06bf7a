"""The async rewards benchmark runs end to end at tiny size."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_benchmark_writes_sync_and_async_rows(tmp_path):
  out = tmp_path / "async_rewards.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "benchmarks", "async_rewards.py"),
       "--steps=2", "--verify_ms=1", "--staleness=1", f"--out={out}"],
      capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(out.read_text())["rows"]
  assert [r["variant"] for r in rows] == ["sync (baseline)", "async, staleness 1"]
  assert [r["mean_staleness"] for r in rows] == [0.0, 1.0]
  assert all(r["steps"] == 2 and r["s_per_step"] > 0 for r in rows)
  assert "| async, staleness 1" in proc.stdout
