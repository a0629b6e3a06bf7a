"""The episode benchmark runs end to end at tiny sizes and writes its table."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_episodes_benchmark_smoke(tmp_path):
  out = tmp_path / "episodes.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "benchmarks", "episodes.py"),
       "--smoke", f"--out={out}"],
      capture_output=True, text=True, check=False, timeout=600,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = {r["system"]: r for r in json.loads(out.read_text())["rows"]}
  assert set(rows) == {"model, batched tools (run_many)", "model, sequential tools (baseline)",
                       "model, 2 row groups in threads (tools overlap generation)",
                       "oracle policy (tools only)"}
  assert rows["model, sequential tools (baseline)"]["same_episodes_as_batched"]
  assert rows["model, 2 row groups in threads (tools overlap generation)"][
      "same_episodes_as_batched"]
  assert rows["oracle policy (tools only)"]["reward_mean"] == 1.0
  assert all(r["episodes"] == 3 and r["episodes_per_min"] > 0 for r in rows.values())
  assert "episodes/min" in proc.stdout
