"""Non-finite guard: skipped updates, rollbacks, a clear stop, no bad checkpoints."""

import json
import os

import numpy as np
import pytest

from configs import grpo_arithmetic, sft_arithmetic
from rl_fixtures import DIGIT_DOMAIN
from rl_post.checkpoint import CheckpointManager
from rl_post.checkpoint import integrity
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer
from rl_post.sft import trainer as sft_trainer
from rl_post.training.guard import NonFiniteTrainingError


def rl_config(tokenizer_path, num_steps, **faults):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=8)
  c.rl.update(max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=8,
              checkpoint_every=1, eval_every=0, num_steps=num_steps)
  c.rewards.num_workers = 0
  c.faults.update(**faults)
  return c


def _stored_states(workdir):
  """{step: stored state as host arrays} of every checkpoint on disk."""
  out = {}
  with CheckpointManager(os.path.join(workdir, "checkpoints")) as ckpt:
    for step in ckpt.all_steps():
      restored = ckpt._mgr.restore(step)  # raw arrays, whatever the tree
      out[step] = integrity.host_leaves(restored["state"])
  return out


def _faults(workdir):
  with open(os.path.join(workdir, "faults.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_nan_loss_skips_the_update_and_is_counted(tokenizer_path, tmp_path):
  config = rl_config(tokenizer_path, 2, nonfinite_loss_at_steps=(2,))
  trainer.train(config, str(tmp_path))
  rows = read_metrics(str(tmp_path))
  assert [r["guard/skipped"] for r in rows] == [0.0, 1.0]
  assert rows[1]["loss"] is None and rows[0]["loss"] is not None
  assert rows[1]["guard/skipped_steps"] == 1 and rows[1]["faults/injected_nonfinite_loss"] == 1
  assert rows[1]["guard/rollbacks"] == 0
  states = _stored_states(str(tmp_path))
  assert sorted(states) == [1, 2]
  for name, x in states[2].items():  # params and optimizer state untouched by step 2
    if name != "step":
      np.testing.assert_array_equal(x, states[1][name], err_msg=name)
  assert int(states[2]["step"]) == 2  # the step counter still advances
  assert [f["kind"] for f in _faults(str(tmp_path))] == [
      "injected_nonfinite_loss", "nonfinite_update_skipped"]


def test_diverging_run_rolls_back_then_stops_with_clear_error(tokenizer_path, tmp_path):
  config = rl_config(tokenizer_path, 8)
  config.optimizer.learning_rate = 1e30
  config.guard.update(max_nonfinite_steps=2, max_rollbacks=2)
  with pytest.raises(NonFiniteTrainingError, match=r"after 2 rollbacks .*max_rollbacks"):
    trainer.train(config, str(tmp_path))
  kinds = [f["kind"] for f in _faults(str(tmp_path))]
  assert kinds.count("rollback") == 2 and kinds[-1] == "nonfinite_training_error"
  assert kinds.count("nonfinite_update_skipped") == 6  # 2 per streak, 3 streaks
  for step, leaves in _stored_states(str(tmp_path)).items():
    assert integrity.nonfinite_leaves(leaves) == [], step
  steps = [r["step"] for r in read_metrics(str(tmp_path))]
  assert steps == sorted(set(steps))  # rolled-back rows were dropped, none duplicated


def test_sft_diverging_run_stops_and_keeps_finite_checkpoints(tokenizer_path, tmp_path):
  c = sft_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.sft.update(num_steps=12, batch_size=4, checkpoint_every=1)
  c.optimizer.update(learning_rate=1e30, warmup_steps=0, schedule="constant")
  c.guard.update(max_nonfinite_steps=2, max_rollbacks=1)
  with pytest.raises(NonFiniteTrainingError, match="after 1 rollbacks"):
    sft_trainer.train(c, str(tmp_path))
  kinds = [f["kind"] for f in _faults(str(tmp_path))]
  assert kinds.count("rollback") == 1
  for step, leaves in _stored_states(str(tmp_path)).items():
    assert integrity.nonfinite_leaves(leaves) == [], step


def test_guard_config_errors_name_the_field(tokenizer_path, tmp_path):
  config = rl_config(tokenizer_path, 1)
  config.guard.max_nonfinite_steps = 0
  with pytest.raises(ValueError, match="guard.max_nonfinite_steps must be an int >= 1"):
    trainer.train(config, str(tmp_path))
  config = rl_config(tokenizer_path, 1, kill_at_steps=(0,))
  with pytest.raises(ValueError, match="faults.kill_at_steps must be a tuple of ints >= 1"):
    trainer.train(config, str(tmp_path))


def test_apply_if_applies_or_keeps_the_state_and_reports_the_update_norm():
  import jax
  import jax.numpy as jnp
  import optax

  from rl_post.training import guard
  optimizer = optax.adamw(0.1)
  params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
  opt_state = optimizer.init(params)
  grads = {"w": jnp.full((3, 2), 0.5), "b": jnp.ones(2)}
  step = jax.jit(guard.apply_if, static_argnums=1)
  new_params, new_opt_state, norm = step(jnp.bool_(True), optimizer, grads, opt_state, params)
  updates, want_opt_state = optimizer.update(grads, opt_state, params)
  want = optax.apply_updates(params, updates)
  for got, expected in zip(jax.tree.leaves((new_params, new_opt_state)),
                           jax.tree.leaves((want, want_opt_state))):
    np.testing.assert_allclose(got, expected, rtol=1e-6)
  np.testing.assert_allclose(norm, optax.tree.norm(updates), rtol=1e-6)
  bad = jax.tree.map(lambda g: g * jnp.nan, grads)
  kept_params, kept_opt_state, norm = step(jnp.bool_(False), optimizer, bad, opt_state, params)
  for got, expected in zip(jax.tree.leaves((kept_params, kept_opt_state)),
                           jax.tree.leaves((params, opt_state))):
    np.testing.assert_array_equal(got, expected)
  assert np.isnan(norm)
