"""Evaluating a training workdir: read only (a corrupt step is skipped, never moved
aside), the evaluated step is recorded, PPO's critic is part of the restore target,
and a bad value in the workdir's own config.json is blamed on --checkpoint."""

import gc
import json
import os
import shutil

import jax
import numpy as np
import pytest

from configs import ppo_arithmetic
from rl_post.checkpoint.manager import CheckpointManager
from rl_post.config_sections import from_section
from rl_post.errors import MissingInputError
from rl_post.evaluate import checkpoint_eval
from rl_post.parallel import mesh as mesh_lib
from rl_post.rl import config as rl_config
from rl_post.rl import critic as critic_lib
from rl_post.training import state as state_lib
from rl_post.training.faults import corrupt_step
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.run import model_config_from, write_config

# Orbax reports a failed read once more from a background thread.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def _free_failed_reads():
  """orbax's failed reads leave tasks behind: collect them under this module's filter,
  not in whichever test the garbage collector happens to run next."""
  yield
  gc.collect()


def _config(tokenizer_path, algorithm):
  config = ppo_arithmetic.get_config("tiny")
  config.rl.algorithm = algorithm
  config.tokenizer.path = tokenizer_path
  config.tasks.heldout_size = 4
  return config


def _states(config, tokenizer, seeds, with_critic):
  """TrainStates as the trainers save them (PPO: with the critic and its optimizer state)."""
  model_config = model_config_from(config, tokenizer)
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.sharding_rules)
  opt = from_section(OptimizerConfig, config.optimizer, "optimizer")
  optimizer = make_optimizer(opt)
  states = [state_lib.create_train_state(model_config, optimizer, mesh, rules,
                                         jax.random.key(seed)) for seed in seeds]
  if not with_critic:
    return states
  algo = rl_config.load(config.rl).algo
  critic_optimizer = critic_lib.make_critic_optimizer(opt, algo.critic_learning_rate)
  shardings = critic_lib.with_critic_shardings(
      state_lib.state_shardings(model_config, optimizer, mesh, rules), algo.critic, model_config,
      critic_optimizer, mesh, rules)
  return [critic_lib.attach_critic(s, algo.critic, model_config, critic_optimizer, shardings)
          for s in states]


def _save_workdir(workdir, config, steps_states):
  write_config(workdir, config)
  with CheckpointManager(os.path.join(workdir, "checkpoints")) as manager:
    for step, state in steps_states:
      manager.save(step, state)
  return workdir


@pytest.fixture(scope="module")
def runs(tokenizer_path, tokenizer, tmp_path_factory):
  """A GRPO workdir with steps 5 and 10 (different params) and a PPO workdir at step 2."""
  root = tmp_path_factory.mktemp("runs")
  grpo = _config(tokenizer_path, "grpo")
  s5, s10 = _states(grpo, tokenizer, (5, 10), with_critic=False)
  ppo = _config(tokenizer_path, "ppo")
  (p2,) = _states(ppo, tokenizer, (2,), with_critic=True)
  return {"grpo": _save_workdir(str(root / "grpo"), grpo, [(5, s5), (10, s10)]),
          "ppo": _save_workdir(str(root / "ppo"), ppo, [(2, p2)]),
          "config": grpo, "params": {5: s5.params, 10: s10.params, "ppo": p2.params}}


def _copy(runs, name, tmp_path):
  return shutil.copytree(runs[name], str(tmp_path / name))


def _load(path, config, tokenizer):
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  return checkpoint_eval.load_checkpoint(path, config, tokenizer, mesh,
                                         tuple(tuple(r) for r in config.sharding_rules))


def _files(path):
  return sorted(os.path.relpath(os.path.join(d, f), path)
                for d, _, names in os.walk(path) for f in names)


def _equal(a, b):
  return all(np.array_equal(np.asarray(x), np.asarray(y))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("how,reason", [("truncate", "unreadable"), ("flip", "checksum")])
def test_corrupt_newest_step_is_skipped_and_left_in_place(runs, tokenizer, tmp_path, how,
                                                          reason):
  workdir = _copy(runs, "grpo", tmp_path)
  corrupt_step(os.path.join(workdir, "checkpoints", "10"), how)
  before = _files(workdir)
  loaded = _load(workdir, runs["config"], tokenizer)
  assert loaded.step == 5 and _equal(loaded.params, runs["params"][5])
  assert [(s["step"], s["reason"]) for s in loaded.skipped_steps] == [(10, reason)]
  assert _files(workdir) == before  # nothing moved to checkpoints/corrupt/


def test_no_readable_step_names_the_flag_and_moves_nothing(runs, tokenizer, tmp_path):
  workdir = _copy(runs, "grpo", tmp_path)
  for step in ("5", "10"):
    corrupt_step(os.path.join(workdir, "checkpoints", step), "truncate")
  before = _files(workdir)
  with pytest.raises(MissingInputError, match=r"none of its checkpoint steps \[5, 10\] can be "
                     r"read \(step 10: unreadable: ") as info:
    _load(workdir, runs["config"], tokenizer)
  assert info.value.field == "--checkpoint" and "\n" not in str(info.value)
  assert _files(workdir) == before


def test_evaluation_records_the_step(runs, tmp_path):
  workdir = _copy(runs, "grpo", tmp_path)
  corrupt_step(os.path.join(workdir, "checkpoints", "10"), "truncate")
  settings = checkpoint_eval.EvalSettings(num_samples=1, ks=(1,), max_new_tokens=4,
                                          batch_size=4)
  result = checkpoint_eval.evaluate_checkpoint(runs["config"], workdir, settings)
  paths = checkpoint_eval.write_outputs(str(tmp_path / "out"), result)
  with open(paths["json"]) as f:
    stored = json.load(f)
  assert stored["checkpoint_step"] == 5
  assert [s["step"] for s in stored["skipped_steps"]] == [10]
  with open(paths["markdown"]) as f:
    markdown = f.read()
  assert ("Training checkpoint step 5. Newer steps skipped, they cannot be read: "
          "10 (unreadable).") in markdown


def test_ppo_workdir_restores_with_its_critic(runs, tokenizer):
  loaded = _load(runs["ppo"], runs["config"], tokenizer)
  assert loaded.step == 2 and _equal(loaded.params, runs["params"]["ppo"])


def _bad_schedule(text):
  stored = json.loads(text)
  stored["optimizer"]["schedule"] = "bogus"
  return json.dumps(stored)


@pytest.mark.parametrize("edit,match", [
    (_bad_schedule, r"holds a config.json \(the config its run was trained with\) that is not "
                    r"valid: optimizer.schedule must be one of .*got 'bogus'"),
    (lambda text: text[:len(text) // 2], r"has an unreadable config.json \(JSONDecodeError"),
], ids=["bad_value", "cut_short"])
def test_bad_workdir_config_names_checkpoint(runs, tokenizer, tmp_path, edit, match):
  workdir = _copy(runs, "grpo", tmp_path)
  path = os.path.join(workdir, "config.json")
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(edit(text))
  with pytest.raises(MissingInputError, match=match) as info:
    _load(workdir, runs["config"], tokenizer)
  assert info.value.field == "--checkpoint" and info.value.value == workdir
