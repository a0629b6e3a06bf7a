"""Smoke test of experiments/benchmarks/lora_step.py: full fine-tuning and LoRA on an
int8 base, GRPO steps of the SmolLM2 config's `tiny` variant in child processes, peak
RSS of each, one table."""

import json

import pytest

from experiments.benchmarks import lora_step


def test_smoke_run_measures_lora_int8(tmp_path, capsys):
  out = tmp_path / "l.json"
  # one child run keeps CI short: "full" is the child run test_smollm2_step_benchmark.py's
  # smoke makes (smollm2_step.run_child with no flags), "lora" the same flags minus base_quant
  lora_step.main(["--smoke", "--rank=4", "--settings=lora_int8", f"--out={out}"])
  result = json.load(open(out))
  (int8,) = result["settings"]
  assert int8["name"] == "lora_int8" and {"--config.rl.lora.rank=4",
                                          "--config.rl.lora.base_quant=int8"} <= set(int8["flags"])
  assert [r["step"] for r in int8["steps"]] == [1, 2]
  assert int8["peak_rss_gib"] > 0 and int8["steps"][0]["update_s"] > 0
  assert result["config"].endswith(":tiny") and result["cpu"]["cpus"] >= 1
  assert "lora_int8" in capsys.readouterr().out


def test_table_compares_each_setting_with_full():
  steps = [dict(step=1, step_s=9.0, update_s=3.0), dict(step=2, step_s=2.0, update_s=1.0)]
  full = dict(name="full", peak_rss_gib=2.0, steps=steps)
  int8 = dict(name="lora_int8", peak_rss_gib=1.0, steps=[*steps[:1], dict(steps[1], update_s=0.5)])
  assert lora_step.lora_flags("full", 4, 8.0, lora_step.TARGETS) == []
  lines = lora_step.table([full, int8]).splitlines()
  assert lines[1].split() == ["full", "2.00", "1.00", "2.00", "9.0"]
  assert lines[-1] == "lora_int8 / full: peak RSS 0.50x, update 0.50x"
  assert "/ full" not in lora_step.table([int8])


def test_bad_arguments_are_usage_errors(tmp_path):
  for bad in (["--rank=0"], ["--targets=q_proj,attn"], ["--steps=1"], ["--settings=full,x"],
              ["--grad_accum=0"], ["--grad_accum=3"]):
    with pytest.raises(SystemExit) as exit_info:
      lora_step.main(bad + [f"--out={tmp_path / 'l.json'}"])
    assert exit_info.value.code == 2
  assert not (tmp_path / "l.json").exists()
