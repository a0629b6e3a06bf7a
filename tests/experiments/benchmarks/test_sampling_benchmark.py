"""The rollout benchmark runs end to end at tiny sizes and writes its table."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_benchmark(script, out, *flags):
  """(completed process, JSON result) of experiments/benchmarks/<script> --smoke."""
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "benchmarks", script), "--smoke",
       *flags, f"--out={out}"],
      capture_output=True, text=True, check=False, timeout=600,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc, json.loads(out.read_text())


def test_sampling_benchmark_smoke(tmp_path):
  proc, result = run_benchmark("sampling.py", tmp_path / "sampling.json", "--repeats=1",
                               "--precisions=bfloat16,int8")
  systems = {(r["workload"], r["system"]) for r in result["rows"]}
  assert systems == {("a", "rl_post engine"), ("a", "rl_post main (static)"),
                     ("a", "rl_post engine (bfloat16)"), ("a", "rl_post engine (int8)"),
                     ("a", "HF generate (torch)"), ("a", "matmuls only (floor)"),
                     ("a", "matmuls only, torch (floor)"),
                     ("d", "rl_post continuous"),
                     ("d", "rl_post continuous (no shrink)"),
                     ("d", "rl_post continuous (refill at 1/4 free)"), ("d", "rl_post static")}
  by = {(r["workload"], r["system"]): r for r in result["rows"]}
  assert by["a", "HF generate (torch)"]["hf_logit_max_diff"] < 1e-4  # same weights
  assert by["d", "rl_post continuous"]["tokens_equal_static"]
  assert by["d", "rl_post continuous"]["divergence"] == []
  assert 0 < by["a", "rl_post engine"]["prefill_mfu"] and result["matmul_peak_gflops"] > 0
  assert all(r["tokens_per_s"] > 0 for r in result["rows"])
  assert "engine x" in proc.stdout
  floor = result["floors"]["a"]
  assert floor["matmuls_only_tokens_per_s"] == by["a", "matmuls only (floor)"]["tokens_per_s"]
  assert floor["three_x_hf_tokens_per_s"] == 3 * by["a", "HF generate (torch)"]["tokens_per_s"]
  assert floor["torch_matmuls_only_tokens_per_s"] == by["a", "matmuls only, torch (floor)"][
      "tokens_per_s"]
  fastest = max(floor["matmuls_only_tokens_per_s"], floor["torch_matmuls_only_tokens_per_s"])
  assert floor["three_x_hf_reachable"] == (fastest > floor["three_x_hf_tokens_per_s"])
  assert "matmuls alone allow" in proc.stdout
  bound = by["d", "rl_post continuous"]["step_bound"]
  assert bound["static_steps"] >= bound["continuous_steps"] >= bound["full_width_steps"]
  assert "decode steps static" in proc.stdout
  hf = by["a", "HF generate (torch)"]["tokens_per_s"]
  for precision in ("bfloat16", "int8"):  # the same tokens' worth, against HF in f32
    assert by["a", f"rl_post engine ({precision})"]["tokens"] == by["a", "rl_post engine"]["tokens"]
    assert result["precision_vs_hf"]["a"][precision] == (
        by["a", f"rl_post engine ({precision})"]["tokens_per_s"] / hf)
  assert "by rollout precision" in proc.stdout and result["cpu"]
  assert all(len(r["cpu_seconds_all"]) == 1 for r in result["rows"])  # timed in turns


def test_decode_profile_smoke(tmp_path):
  proc, result = run_benchmark("decode_profile.py", tmp_path / "profile.json", "--calls=2")
  # every per-step op is labelled; the matmuls, attention and cache writes are found
  assert {"matmul: projections and MLP", "matmul: output head", "KV cache write",
          "attention: scores"} <= set(result["by_label"]), result["by_label"]
  assert abs(sum(result["by_label"].values()) - result["us_per_step"]) < 1e-6
  assert all(o["us_per_step"] > 0 for o in result["ops"])
  assert "us/step" in proc.stdout


def test_step_bound_on_hand_made_budgets(monkeypatch):
  # importing the benchmark appends to XLA_FLAGS; monkeypatch restores it
  monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
  from experiments.benchmarks import sampling  # noqa: PLC0415
  # slots 2: static runs [5, 1] then [1, 5] -> 10 steps; first in, first out:
  # slot 0 takes 5, slot 1 takes 1 then 1 then 5 -> ends at 7.
  bound = sampling.step_bound([5, 1, 1, 5], 2)
  assert (bound["static_steps"], bound["continuous_steps"]) == (10, 7)
  assert bound["full_width_steps"] == 6 and abs(bound["ratio"] - 10 / 7) < 1e-12


@pytest.mark.parametrize("flag, message", [
    ("--workloads=a,zz", "--workloads: unknown ['zz']; known: ['a', 'b', 'c', 'd']"),
    ("--precisions=bfloat16,float16", "--precisions: each one of bfloat16, int8"),
])
def test_an_unknown_workload_or_precision_is_a_usage_error(tmp_path, flag, message):
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "experiments", "benchmarks", "sampling.py"),
       flag, f"--out={tmp_path / 's.json'}"],
      capture_output=True, text=True, check=False, timeout=300,
      env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert message in proc.stderr
  assert not (tmp_path / "s.json").exists()
