"""Smoke test of experiments/benchmarks/grpo_step.py at tiny sizes."""

import json

from experiments.benchmarks import grpo_step


def test_smoke_run_writes_table_rows_and_chunking_saves_memory(tmp_path, capsys):
  out = tmp_path / "grpo_step.json"
  grpo_step.main(["--smoke", "--repeats=1", f"--out={out}"])
  result = json.load(open(out))
  assert result["matmul_peak_gflops"] > 0
  assert result["cpu"]["cpus"] >= 1 and result["cpu"]["model_name"]  # whose figures these are
  rows = {r["variant"]: r for r in result["rows"]}
  assert set(rows) == {"baseline", "chunked", "chunked+remat=full+accum=2"}
  for r in rows.values():
    assert r["s_per_update"] > 0 and r["gflop"] > 0 and r["peak_bytes"] > 0
  # vocab 2048 >> width 32: the [N, T, V] logits dominate the baseline's temporaries
  assert rows["chunked"]["temp_bytes"] < 0.6 * rows["baseline"]["temp_bytes"]
  assert rows["chunked+remat=full+accum=2"]["temp_bytes"] < rows["chunked"]["temp_bytes"]
  printed = capsys.readouterr().out
  assert "s/update" in printed and "CPU: " in printed


def test_unknown_precisions_or_systems_are_usage_errors(tmp_path, capsys):
  for flags, message in ((["--precisions=f64"], "--precisions: unknown ['f64']"),
                         (["--whole_step=ours,vllm"], "unknown systems ['vllm']"),
                         (["--before-ref=no-such-ref"], "is not a commit")):
    flags = flags if "--before-ref" in flags[0] else [*flags, "--before-ref=HEAD"]
    try:
      grpo_step.main([*flags, f"--out={tmp_path / 'g.json'}"])
    except SystemExit as e:
      assert e.code == 2
    else:
      raise AssertionError(f"{flags} ran")
    assert message in capsys.readouterr().err
  assert not (tmp_path / "g.json").exists()
