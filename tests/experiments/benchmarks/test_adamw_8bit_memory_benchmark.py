"""Smoke test of experiments/benchmarks/adamw_8bit_memory.py: SmolLM2-135M's exact state
bytes with f32 and 8-bit moments, and one child per state dtype (a 2-layer model)."""

import json

import pytest

from experiments.benchmarks import adamw_8bit_memory


def test_smoke_run_writes_exact_bytes_and_both_children(tmp_path, capsys):
  out = tmp_path / "m.json"
  adamw_8bit_memory.main(["--smoke", f"--out={out}"])
  result = json.load(open(out))
  f32, q8 = result["exact"]["float32"], result["exact"]["int8"]
  assert f32["num_params"] == q8["num_params"] > 134_000_000  # SmolLM2-135M
  assert f32["moments_bytes"] == 8 * f32["num_params"]  # two f32 moments per parameter
  # 1 byte per value and moment plus a 4-byte scale per block of <= 256 (64 for q/k/v)
  assert 2 * q8["num_params"] < q8["moments_bytes"] < 0.27 * f32["moments_bytes"]
  assert q8["quantized_leaves"] > 0 and q8["f32_leaves"] >= 1
  runs = {r["state_dtype"]: r for r in result["runs"]}
  assert set(runs) == {"float32", "int8"}
  assert all(r["peak_rss_gib"] > 0 and len(r["losses"]) == 2 for r in runs.values())
  # the compiled step's arguments (params, state, batch) shrink by the state's saving
  smoke_config, _ = adamw_8bit_memory.model_config(smoke=True)
  saved = (adamw_8bit_memory.state_bytes(smoke_config, "float32")["opt_state_bytes"]
           - adamw_8bit_memory.state_bytes(smoke_config, "int8")["opt_state_bytes"])
  assert saved > 0
  assert runs["float32"]["argument_bytes"] - runs["int8"]["argument_bytes"] == \
      pytest.approx(saved, rel=0.02)
  printed = capsys.readouterr().out
  assert "saved" in printed and "peak RSS" in printed and "CPU: " in printed


def test_bad_arguments_are_usage_errors(tmp_path):
  with pytest.raises(SystemExit) as exit_info:
    adamw_8bit_memory.main(["--steps=0", f"--out={tmp_path / 'm.json'}"])
  assert exit_info.value.code == 2
  assert not (tmp_path / "m.json").exists()
