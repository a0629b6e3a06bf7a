"""Checkpoint evaluation: per-group summaries, settings checks, determinism, files."""

import json
import os

import jax
import numpy as np
import pytest

from configs import grpo_arithmetic
from rl_post.checkpoint.manager import CheckpointManager
from rl_post.checkpoint.params import save_params
from rl_post.config_sections import from_section
from rl_post.data.tokenizer import SentencePieceTokenizer
from rl_post.errors import ConfigError, MissingInputError
from rl_post.evaluate import checkpoint_eval
from rl_post.parallel import mesh as mesh_lib
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.run import model_config_from, write_config


def _results(domains, levels, greedy_correct, num_correct, n, lens=None):
  lens = np.asarray(lens if lens is not None else [4] * len(domains))
  common = {"domain": list(domains), "difficulty": np.asarray(levels), "response_len": lens}
  correct = np.asarray(greedy_correct, np.float32)
  greedy = {**common, "correct": np.asarray(greedy_correct), "num_samples": 1,
            "strict_correct": np.asarray(greedy_correct) & (np.arange(len(domains)) % 2 == 0),
            "reward": correct + 0.1, "components": {"outcome": correct,
                                                    "format": np.ones_like(correct)}}
  sampled = {**common, "num_correct": np.asarray(num_correct), "num_samples": n,
             "num_strict_correct": np.asarray(num_correct) // 2,
             "correct": np.asarray(num_correct) > 0}
  return greedy, sampled


def test_summarize_hand_computed():
  greedy, sampled = _results(["a", "a", "b", "b"], [1, 2, 1, 2], [True, False, False, True],
                             [4, 0, 1, 2], n=4, lens=[2, 4, 6, 8])
  groups = checkpoint_eval.summarize(greedy, sampled, ks=(1, 2))
  assert list(groups) == ["all", "domain=a", "domain=b", "difficulty=1", "difficulty=2",
                          "a/difficulty=1", "a/difficulty=2", "b/difficulty=1",
                          "b/difficulty=2"]
  all_ = groups["all"]
  assert all_["n"] == 4 and all_["greedy"]["completion_rate"] == 0.5
  assert all_["greedy"]["mean_response_len"] == 5.0
  assert all_["greedy"]["mean_reward"] == pytest.approx(0.6)
  assert all_["greedy"]["reward_components"] == {"outcome": 0.5, "format": 1.0}
  assert all_["sampled"]["completion_rate"] == pytest.approx(7 / 16)
  # strict: greedy rows 0 and 2 may count (row 0 is right); sampled halves (2+0+0+1)
  assert all_["greedy"]["strict_completion_rate"] == 0.25
  assert all_["sampled"]["strict_completion_rate"] == pytest.approx(3 / 16)
  # pass@2 per problem, n=4: c=4 -> 1; c=0 -> 0; c=1 -> 1 - C(3,2)/C(4,2) = 1/2;
  # c=2 -> 1 - C(2,2)/C(4,2) = 5/6.
  assert all_["sampled"]["pass_at_k"]["2"] == pytest.approx((1 + 0 + 0.5 + 5 / 6) / 4)
  assert all_["sampled"]["pass_at_k"]["1"] == pytest.approx(7 / 16)
  assert groups["domain=b"]["sampled"]["pass_at_k"]["2"] == pytest.approx((0.5 + 5 / 6) / 2)
  assert groups["difficulty=2"]["greedy"]["completion_rate"] == 0.5
  assert groups["a/difficulty=1"]["greedy"] == {
      "completion_rate": 1.0, "ci_low": pytest.approx(0.2065, abs=1e-4), "ci_high": 1.0,
      "strict_completion_rate": 1.0,
      "mean_response_len": 2.0, "mean_reward": pytest.approx(1.1),
      "reward_components": {"outcome": 1.0, "format": 1.0}}


def test_summarize_needs_the_same_tasks():
  greedy, _ = _results(["a", "b"], [1, 1], [True, False], [1, 0], n=2)
  _, sampled = _results(["b", "a"], [1, 1], [True, False], [1, 0], n=2)
  with pytest.raises(ValueError, match="same tasks in the same order"):
    checkpoint_eval.summarize(greedy, sampled, ks=(1,))


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_samples=2, ks=(1, 4)), r"--ks=\(1, 4\): every k must be <= --num_samples=2"),
    (dict(num_samples=0, ks=(1,)), "--num_samples=0: must be an integer >= 1"),
    (dict(ks=()), r"--ks=\(\): must be a non-empty list"),
    (dict(ks=(0, 1)), "--ks=.*integers >= 1"),
    (dict(temperature=0.0), "--temperature=0.0: must be > 0"),
])
def test_bad_settings_name_the_flag(kwargs, match):
  with pytest.raises(ConfigError, match=match):
    checkpoint_eval.EvalSettings(**kwargs)


def test_settings_take_rl_defaults_and_sort_ks():
  config = grpo_arithmetic.get_config("tiny")
  settings = checkpoint_eval.settings_from(config, num_samples=4, ks=(4, 1, 1), temperature=None)
  assert settings.ks == (1, 4)
  assert settings.max_new_tokens == config.rl.max_new_tokens
  assert settings.temperature == config.rl.temperature


def test_unknown_checkpoint_names_the_flag(tmp_path):
  with pytest.raises(MissingInputError, match="--checkpoint=.*is not an export/ folder"):
    checkpoint_eval.checkpoint_kind(str(tmp_path))


@pytest.fixture(scope="module")
def saved(tokenizer_path, tmp_path_factory):
  """One set of params saved both as an export and as a training workdir's checkpoint."""
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.tasks.heldout_size = 8
  config.rl.max_new_tokens = 8
  model_config = model_config_from(config, SentencePieceTokenizer(tokenizer_path))
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.sharding_rules)
  optimizer = make_optimizer(from_section(OptimizerConfig, config.optimizer, "optimizer"))
  state = state_lib.create_train_state(model_config, optimizer, mesh, rules, jax.random.key(3))
  root = tmp_path_factory.mktemp("ckpt")
  export = save_params(str(root / "export"), model_config, state.params)
  workdir = str(root / "run")
  write_config(workdir, config)
  with CheckpointManager(os.path.join(workdir, "checkpoints")) as manager:
    manager.save(5, state)
  return config, export, workdir


def test_evaluation_is_deterministic_and_writes_files(saved, tmp_path):
  config, export, workdir = saved
  settings = checkpoint_eval.EvalSettings(num_samples=3, ks=(1, 3), max_new_tokens=8,
                                          batch_size=4)
  first = checkpoint_eval.evaluate_checkpoint(config, export, settings)
  again = checkpoint_eval.evaluate_checkpoint(config, export, settings)
  from_workdir = checkpoint_eval.evaluate_checkpoint(config, workdir, settings)
  assert first == again
  assert from_workdir["groups"] == first["groups"]
  assert from_workdir["per_problem"] == first["per_problem"]
  per_problem = first["per_problem"]
  assert len(per_problem["greedy_correct"]) == 8
  all_ = first["groups"]["all"]
  assert all_["greedy"]["completion_rate"] == np.mean(per_problem["greedy_correct"])
  assert all_["sampled"]["completion_rate"] == pytest.approx(
      np.sum(per_problem["sampled_num_correct"]) / (3 * 8))
  assert 1 <= all_["greedy"]["mean_response_len"] <= 8
  assert {"outcome", "format"} <= set(all_["greedy"]["reward_components"])
  assert all_["greedy"]["reward_components"]["outcome"] == pytest.approx(
      all_["greedy"]["completion_rate"])

  paths = checkpoint_eval.write_outputs(str(tmp_path / "out"), first)
  with open(paths["json"]) as f:
    assert json.load(f) == json.loads(json.dumps(first))
  with open(paths["markdown"]) as f:
    markdown = f.read()
  assert ("| group | problems | greedy | greedy 95% CI | greedy strict | pass@1 | pass@3 | "
          "pass@1 strict |") in markdown
  assert "| difficulty=1 |" in markdown and "| arithmetic/difficulty=1 |" in markdown
  header = next(line for line in markdown.splitlines() if line.startswith("| group | reward |"))
  assert "| format |" in header and "| outcome |" in header
  assert set(first["verifier_errors"]) == {"greedy", "sampled"}
  assert "Verifier errors (sampled, scored 0): " in markdown


def test_missing_tokenizer_is_named(saved, tmp_path):
  _, export, _ = saved
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = str(tmp_path / "missing.model")
  with pytest.raises(MissingInputError, match="tokenizer.path=.*does not exist"):
    checkpoint_eval.evaluate_checkpoint(config, export, checkpoint_eval.EvalSettings())


def test_unbuilt_eval_set_is_named(tmp_path):
  config = grpo_arithmetic.get_config("tiny")
  config.tasks.eval_sets = ("arithmetic",)
  config.tasks.eval_data_dir = str(tmp_path)
  with pytest.raises(MissingInputError, match="tasks.eval_data_dir=.*is not built"):
    checkpoint_eval.heldout_tasks(config)
