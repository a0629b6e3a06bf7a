"""Smoke test of experiments/benchmarks/update_profile.py: the update's trace, grouped."""

import json

import pytest

from experiments.benchmarks import update_profile


def test_ops_are_grouped_by_what_they_compute():
  assert update_profile.group({"dot", "add"}) == "matmul"
  assert update_profile.group({"copy", "transpose", "multiply"}) == "transposing copy"
  assert update_profile.group({"dynamic-slice", "add"}).startswith("layer-scan slicing")
  assert update_profile.group({"exponential", "reduce"}).startswith("exp/log")
  assert update_profile.group({"add"}) == "other elementwise and reductions"


def test_smoke_profile_traces_matmuls_and_writes_json(tmp_path, capsys):
  out = tmp_path / "update_profile.json"
  by_group = update_profile.main(["--smoke", "--calls=2", f"--out={out}"])
  result = json.load(open(out))
  assert by_group["matmul"] > 0 and result["by_group"]["matmul"] > 0
  assert result["ms_per_update"] >= max(result["by_group"].values())
  assert result["cpu"]["cpus"] >= 1 and result["ops"][0]["ms_per_update"] > 0
  printed = capsys.readouterr().out
  assert "largest ops outside matmuls" in printed and "CPU: " in printed


def test_a_setting_the_rl_config_refuses_is_a_usage_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_info:
    update_profile.main(["--smoke", "--remat=bogus", f"--out={tmp_path / 'u.json'}"])
  assert exit_info.value.code == 2
  assert "rl.remat must be one of" in capsys.readouterr().err
  assert not (tmp_path / "u.json").exists()
