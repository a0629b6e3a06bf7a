"""The domains benchmark runs end to end at tiny sizes."""

import json
import os
import subprocess
import sys

from rl_post.tasks import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_benchmark_covers_every_domain_and_both_grading_systems(tmp_path):
  out = tmp_path / "domains.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "benchmarks", "domains.py"),
       "--tasks_per_domain=3", "--grading_completions=4", "--repeats=1",
       "--humaneval_check=false", f"--output={out}"],
      capture_output=True, text=True, check=False, timeout=300,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert [r["domain"] for r in result["domains"]] == registry.available()
  assert all(r["demonstrations_correct"] == 1.0 for r in result["domains"]), result["domains"]
  assert [r["passed"] for r in result["code_grading"]] == [4, 4]
  assert result["code_grading_speedup"] > 0
  assert "| shared sandbox (run_many) | 4 | 2 |" in proc.stdout
