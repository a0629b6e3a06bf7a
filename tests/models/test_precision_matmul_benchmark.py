"""Smoke test of experiments/benchmarks/precision_matmul.py: every kind timed, JSON and table written."""

import json

from experiments.benchmarks import precision_matmul


def test_smoke_times_every_precision_and_layout(tmp_path, capsys):
  out = tmp_path / "precision_matmul.json"
  precision_matmul.main(["--smoke", "--repeats=2", f"--out={out}"])
  (row,) = json.load(open(out))["rows"]
  assert row["mkn"] == [32, 16, 64]
  assert set(row["ms"]) == set(precision_matmul.KINDS) and all(v > 0 for v in row["ms"].values())
  assert row["f32_over_bf16_f32"] == row["ms"]["f32"] / row["ms"]["bf16->f32"]
  assert "bf16->f32 x^T" in capsys.readouterr().out
