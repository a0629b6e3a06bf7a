"""Smoke test of experiments/benchmarks/lora_step.py: full fine-tuning and LoRA on an
int8 base, GRPO steps of the SmolLM2 config's `tiny` variant in child processes, peak
RSS of each, one table."""

import json

import pytest

from experiments.benchmarks import lora_step


def test_smoke_run_measures_full_and_lora(tmp_path, capsys):
  out = tmp_path / "l.json"
  # two of the three settings keep CI short: "lora" runs the same flags minus base_quant
  lora_step.main(["--smoke", "--rank=4", "--settings=full,lora_int8", f"--out={out}"])
  result = json.load(open(out))
  full, int8 = result["settings"]
  assert (full["name"], full["flags"]) == ("full", [])
  assert int8["name"] == "lora_int8" and {"--config.rl.lora.rank=4",
                                          "--config.rl.lora.base_quant=int8"} <= set(int8["flags"])
  for setting in (full, int8):
    assert [r["step"] for r in setting["steps"]] == [1, 2]
    assert setting["peak_rss_gib"] > 0 and setting["steps"][0]["update_s"] > 0
  assert result["config"].endswith(":tiny") and result["cpu"]["cpus"] >= 1
  assert "lora_int8 / full: peak RSS" in capsys.readouterr().out


def test_bad_arguments_are_usage_errors(tmp_path):
  for bad in (["--rank=0"], ["--targets=q_proj,attn"], ["--steps=1"], ["--settings=full,x"]):
    with pytest.raises(SystemExit) as exit_info:
      lora_step.main(bad + [f"--out={tmp_path / 'l.json'}"])
    assert exit_info.value.code == 2
  assert not (tmp_path / "l.json").exists()
