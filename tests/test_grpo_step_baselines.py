"""grpo_step.py's whole-step rows (step_baselines.py) at tiny size: our side end to
end, a baseline that fails becomes a row with its error, and a missing baseline
environment stops the run first with a message naming setup_baselines.sh.

The TRL and Tunix sides need the environments setup_baselines.sh creates,
which CI does not install; these tests never use them.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "experiments", "benchmarks")
sys.path.insert(0, BENCH)

import step_baselines  # noqa: E402
from synthetic import even_fraction_N  # noqa: E402


def test_whole_step_rows_ours_and_a_failing_baseline(tmp_path):
  core = max(os.sched_getaffinity(0))
  rows = step_baselines.whole_step_rows({"ours": sys.executable, "trl": "/bin/false"},
                                        smoke=True, steps=2, core=core, workdir=str(tmp_path))
  ours, trl = rows
  assert (ours["workload"], ours["system"], ours["steps"]) == ("smoke", "rl_post (JAX)", 2)
  assert ours["s_per_step"] > 0 and ours["cpu_s_per_step"] > 0 and ours["x_ours"] == 1.0
  # 2 prompts x G=2, 8 tokens each, no EOS: every row samples its whole budget
  assert ours["rollout_tokens_per_s"] > 0 and len(ours["reward_mean"]) == 2
  assert trl == dict(workload="smoke", system="TRL GRPOTrainer", error="exit 1: ")
  text = step_baselines.table(rows)
  assert "rl_post (JAX)" in text and "TRL GRPOTrainer" in text and "failed: exit 1" in text


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
