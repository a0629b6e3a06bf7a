"""Smoke test of experiments/benchmarks/sft_packing.py: both variants on the demo's stream."""

import json

from experiments.benchmarks import sft_packing


def test_smoke_times_one_per_row_and_packed(tmp_path, capsys):
  out = tmp_path / "sft_packing.json"
  sft_packing.main(["--smoke", "--row_multiple=2", f"--out={out}"])
  result = json.load(open(out))
  base, packed = result["rows"]
  assert (base["variant"], base["rows"], packed["variant"]) == ("one per row", 8, "packed")
  assert 2 <= packed["rows"] <= 8  # as many as the demonstrations need, in pairs
  assert all(r["s_per_step"] > 0 and 0 < r["fill"] <= 1 for r in result["rows"])
  assert base["dropped_frac"] == packed["dropped_frac"] == 0 and packed["fill"] > base["fill"]
  assert "packed / one per row" in capsys.readouterr().out
