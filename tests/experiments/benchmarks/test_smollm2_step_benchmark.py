"""Smoke test of experiments/benchmarks/smollm2_step.py: SmolLM2 GRPO steps in a child
process, per-step rows, peak RSS and the CPU in its JSON (the `tiny` variant, 2 steps)."""

import json

import pytest

from experiments.benchmarks import smollm2_step


def test_smoke_run_writes_steps_rss_and_cpu(tmp_path, capsys):
  out = tmp_path / "s.json"
  smollm2_step.main(["--smoke", f"--out={out}"])
  result = json.load(open(out))
  (setting,) = result["settings"]
  assert [r["step"] for r in setting["steps"]] == [1, 2]
  first = setting["steps"][0]
  assert first["programs"] > 0 and first["rollout_tok_s"] > 0 and first["update_s"] > 0
  assert setting["peak_rss_gib"] > 0 and setting["setup_s"] > 0
  assert result["cpu"]["cpus"] >= 1 and result["config"].endswith(":tiny")
  printed = capsys.readouterr().out
  assert "peak RSS" in printed and "CPU: " in printed


def test_bad_arguments_are_usage_errors(tmp_path):
  for bad in (["--steps=1"], ["--new_tokens=6x"], ["--grad_accum=1,x"]):
    with pytest.raises(SystemExit) as exit_info:
      smollm2_step.main(bad + [f"--out={tmp_path / 's.json'}"])
    assert exit_info.value.code == 2
  assert not (tmp_path / "s.json").exists()
