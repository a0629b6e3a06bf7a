"""Held-out evaluation of episodes (rl_post/envs/heldout.py, rl_post/eval/episodes.py): a
fixed task set that training and the cold start never draw, scored by the verifier alone,
with tool use, turns, tokens and pass@k per domain and level, in the trainer's eval."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import grpo_episodes, grpo_episodes_sft
from rl_post.envs import heldout, trainer_rounds
from rl_post.envs.call_vocab import CallVocabTokenizer
from rl_post.envs.domains.base import task_key
from rl_post.envs.policies import RandomPolicy, oracle
from rl_post.errors import ConfigError
from rl_post.eval.episodes import heldout_metrics
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer
from rl_post.sampling.sampler import SamplingConfig
from rl_post.sft import episodes as sft_episodes

FEW = "tests.envs.few_words:FewWords"  # three distinct tasks per level
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_heldout_tasks_are_never_drawn_for_training_or_the_cold_start(sandbox, tmp_path):
  c = grpo_episodes_sft.get_config("tiny")
  c.episodes.update(domains=(FEW,), difficulties=(1,), heldout_size=2,
                    heldout_difficulties=(1,))
  c.cold_start.update(domains=(), tasks_per_level=1)
  section = trainer_rounds.load(c.episodes)
  held = heldout.heldout_tasks(section, 0)
  keys = frozenset(task_key(t) for t in held)
  assert len(keys) == 2  # two of the level's three problems
  assert [t.task_id for t in heldout.heldout_tasks(section, 0)] == [t.task_id for t in held]
  # training: every draw is the one problem left, whatever its task_id
  drawn = [t for it in range(8) for t in trainer_rounds.draw_tasks(section, 0, it, 0, 4,
                                                                   exclude=keys)]
  assert len({t.task_id for t in drawn}) == 32 and len({task_key(t) for t in drawn}) == 1
  assert not keys & {task_key(t) for t in drawn}
  unguarded = [t for it in range(8) for t in trainer_rounds.draw_tasks(section, 0, it, 0, 4)]
  assert keys & {task_key(t) for t in unguarded}  # what the exclusion keeps out
  # the cold start gets the one problem left, and cannot get a second
  stats = sft_episodes.collect(c, str(tmp_path / "e.jsonl"), sandbox=sandbox)
  assert stats["heldout_excluded"] == 2 and stats["kept"] == stats["drawn"] == 1
  cold_section, cold = sft_episodes.sections(c)
  cold_keys = {task_key(t) for t in sft_episodes.draw_tasks(cold_section, cold, 0, keys)}
  assert not cold_keys & keys
  c.cold_start.tasks_per_level = 2
  with pytest.raises(ConfigError, match="cold_start.tasks_per_level=2.*no new task"):
    sft_episodes.collect(c, str(tmp_path / "e2.jsonl"), sandbox=sandbox)


def test_the_oracle_solves_every_heldout_task_and_a_random_policy_fewer(sandbox):
  section = trainer_rounds.load(grpo_episodes.get_config().episodes)
  rounds = trainer_rounds.EpisodeRounds(section, seed=0, tokenizer=CallVocabTokenizer(),
                                        sampling=SamplingConfig(max_new_tokens=256))
  tasks = rounds.heldout
  cells = [(t.domain, t.difficulty) for t in tasks]
  assert len(tasks) == 18 and all(cells.count(cell) == 2 for cell in set(cells))
  assert {level for _, level in cells} == {1, 2, 3} and section.difficulties == (1,)
  solved = heldout.run_policy(tasks, oracle, sandbox, samples=1, make_envs=rounds.make_envs)
  metrics = heldout_metrics(solved, "eval")
  assert metrics["eval/pass_rate"] == metrics["eval/domain_mean/pass_rate"] == 1.0
  assert metrics["eval/episodes"] == 18 and metrics["eval/verify_errors"] == 0
  for domain in ("data_questions", "fs_chores", "repo_repair"):
    for level in (1, 2, 3):
      assert metrics[f"eval/{domain}/difficulty_{level}/pass_rate"] == 1.0
    # the oracle's calls all run (a failing test run counts: its tool ran)
    assert metrics[f"eval/{domain}/call_success"] == 1.0
    assert metrics[f"eval/{domain}/turns_per_solved"] == metrics[
        f"eval/{domain}/turns_per_episode"] >= 3
  assert {k.split("/")[-1] for k in metrics if k.startswith("eval/fs_chores/difficulty_2/")} \
      == {"pass_rate", "call_success", "turns_per_episode", "tokens_per_episode",
          "turns_per_solved"}
  sampled = heldout.run_policy(tasks, RandomPolicy(0), sandbox, samples=2,
                               make_envs=rounds.make_envs)
  metrics = heldout_metrics(sampled, "eval_sampled", ks=(1, 2))
  assert metrics["eval_sampled/episodes"] == 36
  assert metrics["eval_sampled/pass@1"] == metrics["eval_sampled/pass_rate"] < 1.0
  assert metrics["eval_sampled/pass@2"] >= metrics["eval_sampled/pass@1"]
  assert metrics["eval_sampled/call_success"] < 1.0
  with pytest.raises(ValueError, match="pass@4 needs 4 samples of every task; some task has 2"):
    heldout_metrics(sampled, "eval_sampled", ks=(1, 4))


def test_the_trainer_evaluates_heldout_episodes(tmp_path):
  c = grpo_episodes.get_config("tiny")
  c.rl.update(num_steps=1, checkpoint_every=1)
  c.optimizer.total_steps = 1
  c.episodes.update(heldout_size=2, heldout_difficulties=(1, 2), heldout_ks=(1, 2))
  trainer.train(c, str(tmp_path))
  [row] = read_metrics(str(tmp_path))
  assert row["eval/episodes"] == 2 and row["eval_sampled/episodes"] == 4
  for prefix in ("eval", "eval_sampled"):
    for key in ("pass_rate", "call_success", "turns_per_episode", "domain_mean/pass_rate",
                "data_questions/difficulty_1/pass_rate", "data_questions/difficulty_2/pass_rate",
                "data_questions/difficulty_2/call_success"):
      assert 0.0 <= row[f"{prefix}/{key}"] <= max(1.0, row[f"{prefix}/turns_per_episode"])
    assert 0 < row[f"{prefix}/tokens_per_episode"] <= c.rl.max_new_tokens
    assert 1 <= row[f"{prefix}/turns_per_episode"] <= c.episodes.max_turns
  assert row["eval_sampled/pass@2"] >= row["eval_sampled/pass@1"]
  assert "eval/pass@1" not in row and math.isfinite(row["time/eval_s"])


def test_bad_heldout_settings_get_clear_errors(tmp_path):
  c = grpo_episodes.get_config("tiny")
  c.episodes.update(heldout_size=2, heldout_difficulties=(4,))
  with pytest.raises(ConfigError, match=r"episodes.heldout_difficulties=\(4,\).*"
                                        "difficulty must be 1, 2 or 3"):
    heldout.heldout_tasks(trainer_rounds.load(c.episodes), 0)
  c.episodes.update(heldout_difficulties=(), heldout_ks=(0,))
  with pytest.raises(ValueError, match="episodes.heldout_ks"):
    trainer_rounds.load(c.episodes)
  c.episodes.update(heldout_ks=(1,), heldout_size=-1)
  with pytest.raises(ValueError, match="episodes.heldout_size"):
    trainer_rounds.load(c.episodes)
  c = grpo_episodes.get_config("tiny")
  c.tasks.heldout_size = 4
  with pytest.raises(ConfigError, match="tasks.heldout_size=4.*episodes.heldout_size"):
    trainer.train(c, str(tmp_path))


def test_heldout_metrics_of_no_records_are_empty():
  assert heldout_metrics([], "eval") == {}
  record = heldout.EpisodeRecord(task=0, domain="d", difficulty=1, score=1.0,
                                 verify_error=True, tool_calls=0, call_successes=0, turns=1)
  metrics = heldout_metrics([record], "eval")  # a failed verification run is not a success
  assert metrics["eval/pass_rate"] == 0.0 and metrics["eval/verify_errors"] == 1
  assert metrics["eval/call_success"] == 0.0 and "eval/turns_per_solved" not in metrics
  assert np.isfinite(list(metrics.values())).all()


def _tiny_export(config, path):
  import jax
  from rl_post.checkpoint.params import save_params
  from rl_post.config_sections import from_section
  from rl_post.parallel import mesh as mesh_lib
  from rl_post.training import state as state_lib
  from rl_post.training.optimizer import OptimizerConfig, make_optimizer
  from rl_post.training.run import model_config_from
  tokenizer = trainer_rounds.tokenizer_for(trainer_rounds.load(config.episodes))
  model_config = model_config_from(config, tokenizer)
  optimizer = make_optimizer(from_section(OptimizerConfig, config.optimizer, "optimizer"))
  state = state_lib.create_train_state(model_config, optimizer,
                                       mesh_lib.make_mesh(dict(config.mesh)),
                                       tuple(tuple(r) for r in config.sharding_rules),
                                       jax.random.key(0))
  return save_params(path, model_config, state.params, tokenizer=tokenizer)


def test_evaluate_py_reports_heldout_episodes(tmp_path):
  c = grpo_episodes.get_config("tiny")
  export = _tiny_export(c, str(tmp_path / "export"))
  flags = ["--config=configs/grpo_episodes.py:tiny", "--config.episodes.heldout_size=2",
           "--config.episodes.heldout_difficulties=(1,2)", f"--checkpoint={export}",
           "--num_samples=2", "--ks=1,2", "--batch_size=4"]
  done = subprocess.run([sys.executable, "experiments/evaluate.py", *flags,
                         f"--workdir={tmp_path / 'eval'}"], cwd=ROOT, capture_output=True,
                        text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads((tmp_path / "eval" / "eval.json").read_text())
  metrics = result["metrics"]
  assert metrics["eval/episodes"] == 2 and metrics["eval_sampled/episodes"] == 4
  assert len(result["per_episode"]["sampled"]) == 4
  assert {r["difficulty"] for r in result["per_episode"]["greedy"]} == {1, 2}
  assert metrics["eval_sampled/pass@2"] >= metrics["eval_sampled/pass@1"]
  markdown = (tmp_path / "eval" / "eval.md").read_text()
  assert "| data_questions/difficulty=2 |" in markdown and "pass@2" in markdown
  assert "# Held-out episodes of" in done.stdout
  done = subprocess.run([sys.executable, "experiments/evaluate.py", *flags,
                         "--max_new_tokens=8", f"--workdir={tmp_path / 'eval2'}"], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 2 and "--max_new_tokens=8" in done.stderr
