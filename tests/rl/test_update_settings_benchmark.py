"""Smoke test of experiments/benchmarks/update_settings.py: each setting, timed in turns."""

import json

from experiments.benchmarks import update_settings


def test_smoke_times_each_dtype_and_unroll(tmp_path, capsys):
  out = tmp_path / "update_settings.json"
  update_settings.main(["--smoke", "--rounds=2", f"--out={out}"])
  rows = json.load(open(out))["rows"]
  # the smoke model has one layer: unrolled and looped are the same setting, with the
  # log-prob chunks recomputed or kept for the backward
  assert [(r["compute_dtype"], r["unroll_layers"], r["logprob_remat"]) for r in rows] == [
      ("float32", 1, True), ("float32", 1, False), ("bfloat16", 1, True), ("bfloat16", 1, False)]
  assert all(r["update_s"] > 0 and r["reference_s"] > 0 and r["reference_every_position_s"] > 0
             for r in rows)
  assert json.load(open(out))["host_malloc"]["policy"] in ("auto", "retain", "system")
  assert rows[0]["update_vs_f32_loop"] == 1.0
  assert "logprob remat" in capsys.readouterr().out
