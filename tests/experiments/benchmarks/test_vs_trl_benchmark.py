"""vs_trl.py: our side end to end at tiny size, its table and JSON, the TRL-side
tokenizer against ours, and the error when a baseline environment is missing.

The TRL side itself needs the environment setup_baselines.sh creates (torch,
trl), which CI does not install; these tests never use it.
"""

import json
import os
import subprocess
import sys

import pytest

from experiments.benchmarks import baselines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BENCH = os.path.join(ROOT, "experiments", "benchmarks")


def _run(args, timeout=600):
  return subprocess.run([sys.executable, os.path.join(BENCH, "vs_trl.py"), *args],
                        capture_output=True, text=True, check=False, timeout=timeout,
                        env=dict(os.environ, PYTHONPATH=ROOT))


def test_vs_trl_ours_side_smoke(tmp_path):
  out = tmp_path / "vs_trl.json"
  proc = _run(["--smoke", "--baselines=none", "--steps=2", "--prompts=2", "--group=2",
               "--response=8", "--heldout=4", "--sft_steps=0", "--seed=3",
               "--learning_rate=3e-5", f"--workdir={tmp_path / 'w'}", f"--out={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  (ours,) = result["rows"]
  assert ours["system"] == "rl_post (JAX)" and ours["steps"] == 2
  assert ours["s_per_step"] > 0 and ours["first_step_s"] > 0 and ours["rollout_tokens_per_s"] > 0
  assert ours["cpu_s_per_step"] > 0 and len(ours["step_cpu_s"]) == 2
  assert set(ours["time_split_s"]) == {"rollout", "reward", "train"}
  assert 0.0 <= ours["heldout_pass_rate"] <= 1.0 and len(ours["reward_mean"]) == 2
  assert result["hparams"]["loss_type"] == "dapo"  # grpo_arithmetic's token_mean
  assert result["hparams"]["num_steps"] == 2 and result["trl_over_ours"] is None
  assert "rollout tok/s" in proc.stdout and "rl_post (JAX)" in proc.stdout
  assert ours["total_s"] >= ours["first_step_s"] + ours["s_per_step"] * 0.5
  assert "all steps, compiles included: rl_post (JAX)" in proc.stdout
  assert isinstance(ours["compile_steps"], list)
  assert 0.0 <= ours["informative_group_frac"] <= 1.0 and "of groups had rewards" in proc.stdout
  # the TRL side's inputs: HF weights, tasks in step order, held-out set
  spec = json.loads((tmp_path / "w" / "trl_spec.json").read_text())
  assert result["seed"] == spec["seed"] == 3
  assert result["hparams"]["learning_rate"] == spec["hparams"]["learning_rate"] == 3e-5
  assert len(spec["train_tasks"]) == 2 * 2 and len(spec["heldout_tasks"]) == 4
  assert os.path.exists(os.path.join(spec["hf_dir"], "config.json"))


def test_vs_trl_missing_env_names_the_setup_script(tmp_path):
  missing = tmp_path / "no_env" / "bin" / "python"
  proc = _run(["--smoke", f"--trl_python={missing}", f"--workdir={tmp_path / 'w'}",
               f"--out={tmp_path / 'o.json'}"], timeout=120)
  assert proc.returncode == 2
  assert "setup_baselines.sh trl" in proc.stderr and str(missing) in proc.stderr
  assert not (tmp_path / "w").exists() and not (tmp_path / "o.json").exists()


def test_baseline_python_and_summary():
  with pytest.raises(baselines.BaselineEnvMissing, match="setup_baselines.sh tunix"):
    baselines.baseline_python("/nonexistent/bin/python", "tunix")
  assert baselines.baseline_python(sys.executable, "trl") == sys.executable
  s = baselines.step_summary([9.0, 1.0, 3.0, 2.0], [5.0, 0.5, 1.0, 0.5], [10, 10, 20, 10])
  assert s == dict(first_step_s=9.0, s_per_step=2.0, steps=4, rollout_tokens_per_s=20.0)
  assert baselines.step_summary([4.0], [2.0], [8])["rollout_tokens_per_s"] == 4.0
  with pytest.raises(ValueError, match="one rollout time per token count"):
    baselines.step_summary([1.0, 1.0], [1.0], [1, 2])
  rows = [dict(system="ours", first_step_s=10.0, s_per_step=0.5, rollout_tokens_per_s=100,
               heldout_pass_rate=0.5, reward_mean=[0.1, 0.2]),
          dict(system="TRL", first_step_s=1.0, s_per_step=1.5, rollout_tokens_per_s=50,
               reward_mean=[0.3])]
  rows[0]["cpu_s_per_step"] = 0.25
  lines = baselines.comparison_table(rows, "ours").splitlines()
  assert lines[2].split()[3:5] == ["0.250", "1.00"] and lines[3].split()[3:5] == ["-", "3.00"]
  assert "50.0%" in lines[2] and lines[3].split()[6] == "-"


def test_trl_side_tokenizer_matches_ours(tmp_path):
  """The transformers wrapper the TRL side uses encodes prompts like
  batching.prompt_ids and decodes completions like our tokenizer."""
  # transformers + sentencepiece (test extras)
  from experiments.benchmarks.trl_sp_tokenizer import OurSentencePiece

  from rl_post.data import batching
  from rl_post.data.tokenizer import SentencePieceTokenizer, train_sentencepiece
  from rl_post.tasks.arithmetic import Arithmetic
  import numpy as np
  domain = Arithmetic()
  rng = np.random.default_rng(0)
  tasks = [domain.generate(rng, d) for d in (1, 2, 3, 4, 5) * 40]
  lines = [t.prompt + "\n" + domain.demonstration(t) for t in tasks]
  ours = SentencePieceTokenizer(train_sentencepiece(lines, str(tmp_path / "sp"), vocab_size=320))
  theirs = OurSentencePiece(ours.model_path)
  assert (theirs.pad_token_id, theirs.bos_token_id, theirs.eos_token_id) == (
      ours.pad_id, ours.bos_id, ours.eos_id)
  for task in tasks[:25]:
    assert theirs(text=task.prompt + "\n")["input_ids"] == batching.prompt_ids(ours, task.prompt)
    ids = ours.encode(domain.demonstration(task) + " x\n  é") + [ours.eos_id]
    assert theirs.decode(ids, skip_special_tokens=True) == ours.decode(ids)


def test_compile_steps_are_the_first_of_each_new_update_shape():
  from experiments.benchmarks import vs_trl  # noqa: PLC0415 (imports jax)
  row = lambda step, prefix, width: {"step": step, "time/step_s": 0.1 * step,
                                     "rollout/shared_prefix_len": prefix,
                                     "rollout/update_width": width}
  rows = [row(1, 32.0, 48.0), row(2, 32.0, 48.0), row(3, 16.0, 48.0), row(4, 32.0, 48.0),
          row(5, 16.0, 48.0), row(6, 16.0, 32.0)]
  assert [(c["step"], c["shared_prefix_len"], c["update_width"])
          for c in vs_trl.compile_steps(rows)] == [(3, 16.0, 48.0), (6, 16.0, 32.0)]
  no_sharing = [{k: v for k, v in r.items() if k != "rollout/shared_prefix_len"} for r in rows]
  assert [c["step"] for c in vs_trl.compile_steps(no_sharing)] == [6]


def test_vs_trl_cold_then_warm_cache_smoke(tmp_path):
  """--cold_warm: two fresh processes share a new cache; the warm one loads what the
  cold one compiled (counted by JAX's cache-hit events, not timed)."""
  out = tmp_path / "cache.json"
  proc = _run(["--smoke", "--baselines=none", "--cold_warm", "--steps=2", "--prompts=2",
               "--group=2", "--response=8", "--heldout=4", "--sft_steps=0",
               f"--workdir={tmp_path / 'w'}", f"--out={out}"], timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert result["cold_warm"] and result["trl_over_ours"] is None
  cold, warm = result["rows"]
  assert (cold["system"], warm["system"]) == ("rl_post (JAX, cold cache)",
                                              "rl_post (JAX, warm cache)")
  assert cold["cache_hits"] == 0 and cold["programs"] > 0
  # every program the warm run's steps build comes from the cache cold wrote
  assert warm["cache_hits"] >= warm["programs"] > 0
  for row in (cold, warm):
    assert row["steps"] == 2 and row["total_s"] >= row["first_step_s"] > 0
    assert row["process_s"] > row["total_s"] and row["launch_s"] > row["process_s"]
  assert os.listdir(tmp_path / "w" / "compile_cache")
  assert "cache hits" in proc.stdout and "rl_post (JAX, warm cache)" in proc.stdout
