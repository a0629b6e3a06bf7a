"""experiments/benchmarks/host_malloc.py runs end to end on the tiny workload."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_host_malloc_smoke(tmp_path):
  out = tmp_path / "h.json"
  proc = subprocess.run([sys.executable, "experiments/benchmarks/host_malloc.py", "--smoke",
                         "--rounds=1", "--calls=2", f"--out={out}"], cwd=ROOT,
                        capture_output=True, text=True, timeout=600,
                        env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr
  assert "faults/update" in proc.stdout
  rows = json.loads(out.read_text())["rows"]
  assert [(r["workload"], r["policy"]) for r in rows] == [("smoke", "system"), ("smoke", "auto")]
  assert rows[0]["applied"] is False and rows[0]["speedup_vs_system"] == 1.0
  assert all(r["calls"] == 2 and r["update_s"] > 0 for r in rows)
