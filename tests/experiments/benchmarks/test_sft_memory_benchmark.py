"""Smoke test of experiments/benchmarks/sft_memory.py: SmolLM2 SFT steps in child processes
with the whole-logits loss and the chunked one, peak RSS and the same first loss."""

import json

import pytest

from experiments.benchmarks import sft_memory


def test_smoke_run_writes_rss_per_chunk_and_the_cpu(tmp_path, capsys):
  out = tmp_path / "m.json"
  sft_memory.main(["--smoke", f"--out={out}"])
  result = json.load(open(out))
  whole, chunked = result["settings"]
  assert (whole["chunk"], whole["remat"]) == (0, "none")
  assert (chunked["chunk"], chunked["remat"]) == (16, "full")
  for s in (whole, chunked):
    assert [r["step"] for r in s["steps"]] == [1, 2] and s["peak_rss_gib"] > 0
  # the same weights and batch: the chunked loss is the whole-logits loss
  assert chunked["steps"][0]["loss"] == pytest.approx(whole["steps"][0]["loss"], rel=1e-4)
  assert result["cpu"]["cpus"] >= 1 and result["config"].endswith(":tiny")
  assert "CPU: " in capsys.readouterr().out


def test_bad_arguments_are_usage_errors(tmp_path):
  for bad in (["--steps=0"], ["--chunks=4,x"], ["--chunks=-1"], ["--remat=most"]):
    with pytest.raises(SystemExit) as exit_info:
      sft_memory.main(bad + [f"--out={tmp_path / 'm.json'}"])
    assert exit_info.value.code == 2
  assert not (tmp_path / "m.json").exists()
