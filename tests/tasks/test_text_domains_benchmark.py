"""Smoke test of experiments/benchmarks/text_domains.py at tiny sizes."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_benchmark_runs_and_writes_json(tmp_path):
  out = tmp_path / "text_domains.json"
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments/benchmarks/text_domains.py"),
       "--domains=countdown,extraction,rg/gcd", "--tasks=1", "--levels=min",
       "--tag_runs=10,20", "--math_checks=2", f"--out={out}"],
      capture_output=True, text=True, timeout=300, cwd=ROOT,
      env={**os.environ, "PYTHONPATH": ROOT})
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "answer extraction on unclosed tags" in proc.stdout
  result = json.loads(out.read_text())
  assert [r["domain"] for r in result["domains"]] == ["countdown", "extraction", "rg/gcd"]
  assert all(r["demo_pass_rate"] == 1.0 and r["generate_ms"] > 0 for r in result["domains"])
  assert [r["unclosed_tags"] for r in result["extraction_baseline"]] == [10, 20]
  assert result["math_baseline"]["checks"] == 2
