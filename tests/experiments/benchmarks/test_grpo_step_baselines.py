"""grpo_step.py's whole-step rows (step_baselines.py) at tiny size: our side end to
end, a baseline that fails becomes a row with its error, and a missing baseline
environment stops the run first with a message naming setup_baselines.sh.

The TRL and Tunix sides need the environments setup_baselines.sh creates,
which CI does not install; these tests never use them.
"""

import json
import os
import subprocess
import sys

import pytest

from experiments.benchmarks import step_baselines
from experiments.benchmarks.synthetic import even_fraction_N

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BENCH = os.path.join(ROOT, "experiments", "benchmarks")


def test_whole_step_rows_ours_and_a_failing_baseline(tmp_path):
  core = max(os.sched_getaffinity(0))
  rows = step_baselines.whole_step_rows({"ours": sys.executable, "trl": "/bin/false"},
                                        smoke=True, steps=2, core=core, workdir=str(tmp_path))
  ours, trl, xla_floor, torch_floor = rows
  assert (ours["workload"], ours["system"], ours["steps"]) == ("smoke", "rl_post (JAX)", 2)
  assert ours["s_per_step"] > 0 and ours["cpu_s_per_step"] > 0 and ours["x_ours"] == 1.0
  # 2 prompts x G=2, 8 tokens each, no EOS: every row samples its whole budget
  assert ours["rollout_tokens_per_s"] > 0 and len(ours["reward_mean"]) == 2
  assert trl == dict(workload="smoke", system="TRL GRPOTrainer", error="exit 1: ")
  # the step's GEMMs alone, in our interpreter; the torch floor runs in TRL's (failing here)
  assert xla_floor["system"] == "matmuls only, XLA (floor)"
  assert set(xla_floor["phase_s"]) == {"rollout", "reference", "update"}
  assert xla_floor["floor_s"] == pytest.approx(sum(xla_floor["phase_s"].values()))
  assert all(v > 0 for v in xla_floor["phase_s"].values())
  assert torch_floor["system"] == "matmuls only, torch (floor)" and "error" in torch_floor
  text = step_baselines.table(rows)
  assert "rl_post (JAX)" in text and "TRL GRPOTrainer" in text and "failed: exit 1" in text
  assert "matmuls only, XLA (floor)" in text
  assert step_baselines.goals(rows) == []  # no baseline row to compare with


def test_cold_then_warm_cache_rows_of_ours(tmp_path):
  core = max(os.sched_getaffinity(0))
  rows = step_baselines.whole_step_rows({"ours": sys.executable}, smoke=True, steps=2,
                                        core=core, workdir=str(tmp_path), precisions=("f32",),
                                        cold_warm=True)
  ours, cold, warm = [r for r in rows if "floor_s" not in r]
  assert [r["system"] for r in (ours, cold, warm)] == [
      "rl_post (JAX)", "rl_post (JAX, cold cache)", "rl_post (JAX, warm cache)"]
  # the cold run starts from an empty directory; the warm one loads what it wrote
  assert cold["cache_hits"] == 0 < warm["cache_hits"]
  assert os.listdir(tmp_path / "compile_cache_smoke")
  assert all(r["steps"] == 2 and r["first_step_s"] > 0 and "x_ours" in r for r in (cold, warm))
  assert "rl_post (JAX, warm cache)" in step_baselines.table(rows)


def test_mixed_precision_rows_run_ours_in_bf16_and_no_floors(tmp_path):
  core = max(os.sched_getaffinity(0))
  rows = step_baselines.whole_step_rows(
      {"ours": sys.executable, "trl": "/bin/false", "tunix": "/bin/false"}, smoke=True,
      steps=2, core=core, workdir=str(tmp_path), precisions=("bf16",))
  ours, trl = rows  # Tunix has no mixed-precision row; the floors are f32 GEMMs
  assert (ours["workload"], ours["system"]) == ("smoke-bf16", "rl_post (JAX)")
  assert ours["s_per_step"] > 0 and len(ours["reward_mean"]) == 2
  assert trl == dict(workload="smoke-bf16", system="TRL GRPOTrainer", error="exit 1: ")
  with open(tmp_path / "ours_smoke-bf16.json") as f:
    assert json.load(f)["compute_dtype"] == "bfloat16"
  specs = step_baselines.specs(False, 3, step_baselines.parse_precisions("f32,bf16"))
  assert list(specs) == ["a", "b", "a-bf16", "b-bf16"]
  assert {s["compute_dtype"] for s in specs.values()} == {"float32", "bfloat16"}
  with pytest.raises(ValueError, match="--precisions"):
    step_baselines.parse_precisions("fp8")
  goal = step_baselines.goals([dict(workload="b-bf16", system="rl_post (JAX)", s_per_step=0.7),
                               dict(workload="b-bf16", system="TRL GRPOTrainer", s_per_step=1.6)])
  assert goal[0]["met"] and goal[0]["xla_floor_s"] is None
  assert step_baselines.goals_table(goal).rstrip().endswith("-")


def test_goals_compare_half_a_baseline_with_ours_and_the_floors():
  row = lambda system, **kw: dict(workload="b", system=system, **kw)
  rows = [row("rl_post (JAX)", s_per_step=1.7), row("TRL GRPOTrainer", s_per_step=2.2),
          row("Tunix GRPOLearner", s_per_step=3.6),
          row("matmuls only, XLA (floor)", floor_s=1.2),
          row("matmuls only, torch (floor)", floor_s=0.9)]
  trl, tunix = step_baselines.goals(rows)
  assert (trl["half_baseline_s"], trl["met"], trl["reachable_with_xla"],
          trl["reachable_in_f32"]) == (1.1, False, False, True)
  assert (tunix["met"], tunix["reachable_with_xla"]) == (True, True)
  assert tunix["ours_over_xla_floor"] == pytest.approx(1.7 / 1.2)
  text = step_baselines.goals_table([trl, tunix])
  assert "below the XLA floor" in text and "above both" in text


def test_step_gemms_counts_every_matmul_of_the_step():
  from experiments.benchmarks import step_floor
  arch = dict(num_layers=2, embed_dim=8, num_heads=2, num_kv_heads=1, head_dim=4, mlp_dim=16,
              vocab_size=32)
  spec = dict(arch=arch, prompts=3, group=2, prompt_len=5, response=4)
  gemms = step_floor.step_gemms(spec)
  n, r = 6, 4
  # reference: 7 dense matmuls per layer over the 3 prompts once and the 6 responses,
  # the head at response positions
  assert gemms["reference"][(3 * 5, 8, 16)] == 2 * 2  # gate and up, two layers
  assert gemms["reference"][(n * r, 8, 16)] == 2 * 2
  assert gemms["reference"][(n * r, 8, 32)] == 1 and sum(gemms["reference"].values()) == 29
  # update: the forward and, for each of its matmuls, dx and dW
  assert sum(gemms["update"].values()) == 3 * 29
  assert gemms["update"][(8, n * r, 32)] == 1 and gemms["update"][(n * r, 32, 8)] == 1
  # rollout: one prefill of the 3 prompts, then 3 decode steps of all 6 rows
  assert gemms["rollout"][(3 * 5, 8, 16)] == 4 and gemms["rollout"][(n, 8, 16)] == 3 * 4
  assert gemms["rollout"][(3, 8, 32)] == 1 and gemms["rollout"][(n, 8, 32)] == 3
  with pytest.raises(ValueError, match="--backend must be one of"):
    step_floor.floor(spec, "numpy")


def test_missing_baseline_env_names_the_setup_script(tmp_path):
  missing = str(tmp_path / "tunix" / "bin" / "python")
  with pytest.raises(step_baselines.BaselineEnvMissing, match="setup_baselines.sh tunix"):
    step_baselines.interpreters(["ours", "tunix"], {"tunix": missing})
  assert step_baselines.interpreters(["ours"], {}) == {"ours": sys.executable}
  with pytest.raises(ValueError, match="unknown systems \\['vllm'\\]"):
    step_baselines.parse_systems("ours,vllm")
  proc = subprocess.run([sys.executable, os.path.join(BENCH, "grpo_step.py"), "--whole_step_only",
                         "--whole_step=ours,trl", f"--trl_python={missing}",
                         f"--out={tmp_path / 'o.json'}"], capture_output=True, text=True,
                        check=False, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "setup_baselines.sh trl" in proc.stderr and not (tmp_path / "o.json").exists()


def test_synthetic_reward_counts_even_response_tokens():
  import numpy as np
  ids = np.array([[2, 4, 5, 7], [1, 3, 6, 0]])
  mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]])
  assert even_fraction_N(ids, mask).tolist() == [0.5, pytest.approx(1 / 3)]
