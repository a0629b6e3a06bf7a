"""Smoke test of experiments/benchmarks/overlap_step.py: the synchronous and the
overlapped loop on the tiny GRPO config, in child processes on the same cores."""

import json

import pytest

from experiments.benchmarks import overlap_step


def test_smoke_run_writes_both_variants(tmp_path, capsys):
  out = tmp_path / "o.json"
  overlap_step.main(["--smoke", f"--out={out}"])
  result = json.load(open(out))
  sync, overlapped = result["rows"]
  assert [sync["variant"], overlapped["variant"]] == ["sync (baseline)", "overlap, k=1"]
  assert sync["steps"] == overlapped["steps"] == overlap_step.SMOKE_STEPS
  # steps 2 and 3 were sampled while the previous update ran, with the params before it
  assert (sync["staleness"], overlapped["staleness"]) == (0.0, 1.0)
  assert sync["sampler_gib"] == 0 and overlapped["sampler_gib"] > 0
  for row in (sync, overlapped):
    assert row["s_per_step"] > 0 and row["rollout_s"] > 0 and row["peak_rss_gib"] > 0
  assert result["cpus"] and result["cpu"]["cpus"] >= 1
  printed = capsys.readouterr().out
  assert "| overlap, k=1" in printed and "CPU: " in printed


def test_parse_cpus():
  assert overlap_step.parse_cpus("0-2,5") == {0, 1, 2, 5}
  assert overlap_step.parse_cpus("1") == {1}


def test_bad_arguments_are_usage_errors(tmp_path):
  for bad in (["--steps=2"], ["--cpus=x"], ["--cpus=4096"]):
    with pytest.raises(SystemExit) as exit_info:
      overlap_step.main(bad + [f"--out={tmp_path / 'o.json'}"])
    assert exit_info.value.code == 2
  assert not (tmp_path / "o.json").exists()
