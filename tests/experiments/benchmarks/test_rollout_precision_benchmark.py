"""Smoke test of experiments/benchmarks/rollout_precision.py: one rollout batch per
precision from the same masters, its tokens/s and log-prob gap (a 1-layer model)."""

import json

import numpy as np
import pytest

from experiments.benchmarks import rollout_precision


def test_smoke_run_measures_every_precision(tmp_path, capsys):
  out = tmp_path / "r.json"
  rollout_precision.main(["--smoke", f"--out={out}"])
  result = json.load(open(out))
  rows = {r["precision"]: r for r in result["rows"]}
  assert list(rows) == ["float32", "bfloat16", "int8"]  # the f32 baseline first
  assert len({r["generated_tokens"] for r in rows.values()}) == 1  # no EOS: same count
  for r in rows.values():
    assert r["tokens_per_s"] > 0 and r["wall_tokens_per_s"] > 0 and r["copy_wall_seconds"] >= 0
    assert all(np.isfinite(r[k]) for k in ("logp_abs_diff_mean", "ratio_mean", "kl_k3"))
  assert rows["float32"]["logp_abs_diff_max"] < 1e-5
  assert rows["int8"]["logp_abs_diff_mean"] > 10 * rows["float32"]["logp_abs_diff_mean"]
  assert rows["float32"]["same_tokens_as_float32"] == 1.0
  printed = capsys.readouterr().out
  assert "|dlogp| mean" in printed and "CPU: " in printed


def test_bad_arguments_are_usage_errors(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_info:
    rollout_precision.main(["--model=gpt2", f"--out={tmp_path / 'r.json'}"])
  assert exit_info.value.code == 2
  assert "--model: unknown 'gpt2'; known: ['smollm2', 'random']" in capsys.readouterr().err
  assert not (tmp_path / "r.json").exists()
