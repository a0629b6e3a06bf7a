"""A run's compiled programs are bounded by its shape buckets (rl/shape_buckets.py),
counted, not timed; rounding a shape to its bucket leaves the update's numbers alone."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_fixtures import VARIED_DOMAIN
from rl_post import models
from rl_post.metrics.writers import read_metrics
from rl_post.models.config import ModelConfig
from rl_post.rl import components, shape_buckets, trainer
from rl_post.rl import config as rl_config
from rl_post.rl.train_step import make_rl_train_step, rollout_batch, trim_batch
from rl_post.training.state import TrainState
from tiny_grpo import tiny_digit_config


def test_default_prefix_ladder_and_rounding():
  assert shape_buckets.default_prefix_buckets(200) == (8, 16, 24, 32, 48, 64, 96, 128, 192)
  assert shape_buckets.default_prefix_buckets(7) == ()
  ladder = shape_buckets.default_prefix_buckets(100)
  assert [shape_buckets.round_prefix(n, ladder) for n in (0, 7, 8, 23, 24, 47, 48, 100)] == [
      0, 0, 8, 16, 24, 32, 48, 96]
  rl = rl_config.load(dict(shared_prefix=True, num_generations=2, prefix_buckets=(12, 40)))
  assert shape_buckets.prefix_buckets(rl, 39) == (12,)
  with pytest.raises(ValueError, match="rl.prefix_buckets must be strictly increasing"):
    rl_config.load(dict(prefix_buckets=(16, 8)))


def test_plan_lists_every_reachable_shape():
  rl = rl_config.load(dict(max_prompt_len=24, max_new_tokens=8, shared_prefix=True,
                           num_generations=2, width_multiple=16, prompt_buckets=(16, 32)))
  plan = shape_buckets.plan(rl, (16, 32), needs_reference=True)
  assert plan.rollout_widths == (24, 40)
  assert plan.prefixes == (0, 8, 16, 24, 32)
  # width 24: rows end in 1..24 -> 16 or 24; width 40: prompts of 17+ -> 32 or 40
  assert sorted({w for _, w in plan.update_keys}) == [16, 24, 32, 40]
  assert (16, 16) not in plan.update_keys and (8, 16) in plan.update_keys  # >= 1 own position
  assert plan.update_programs == 2 + 3 + 4 + 5
  assert plan.reference_keys == ((0, 24), (0, 40), (8, 24), (8, 40), (16, 24), (16, 40),
                                 (24, 40), (32, 40))
  assert "at most 14 update programs" in plan.describe()
  untrimmed = shape_buckets.plan(rl, (16, 32), trims_width=False, needs_reference=False)
  assert untrimmed.update_programs == 3 + 5 and untrimmed.reference_programs == 0


def test_a_short_run_builds_no_more_programs_than_its_plan(tokenizer_path, tmp_path,
                                                           monkeypatch):
  jitted = []
  real = components.jit_train_step
  monkeypatch.setattr(components, "jit_train_step",
                      lambda *a, **k: jitted.append(real(*a, **k)) or jitted[-1])
  buckets = (24, 32, 48)  # prompts of 17-24 tokens, + about 6 per extra word
  config = tiny_digit_config(tokenizer_path, num_steps=8, shared_prefix=True,
                             prompt_buckets=buckets, metrics_one_step_late=False)
  config.rl.max_prompt_len = 48
  config.rl.grpo.kl_coef = 0.0  # no reference forward: the update and rollout shapes alone
  config.tasks.domains = (VARIED_DOMAIN,)
  config.rewards.num_workers = 0
  trainer.train(config, str(tmp_path))
  rows = [m for m in read_metrics(str(tmp_path)) if "loss" in m]
  assert len(rows) == 8
  plan = shape_buckets.plan(rl_config.load(config.rl), buckets)
  assert rows[0]["compile/update_programs_bound"] == plan.update_programs
  update_keys = [(int(m["rollout/shared_prefix_len"]), int(m["rollout/update_width"]))
                 for m in rows]
  assert set(update_keys) <= set(plan.update_keys)
  assert len(set(update_keys)) >= 2, update_keys  # the run's shapes did move
  # counted by JAX: one update program per (prefix, width) the run reached, within the plan
  assert sum(f._cache_size() for f in jitted) == len(set(update_keys)) <= plan.update_programs
  # a step whose shapes all came before builds no program at all
  seen = set()
  for m, key in zip(rows, update_keys):
    shapes = (int(m["rollout/width"]),) + key
    if shapes in seen:
      assert m["compile/programs"] == 0, (m["step"], shapes)
    seen.add(shapes)
  assert any(m["compile/programs"] == 0 for m in rows[1:])


def test_a_bucketed_update_equals_the_exact_one():
  """The same batch, updated at its exact shared length and full width, and at the
  rungs a run rounds them to: the same loss, gradient and parameters."""
  g, p, s = 2, 21, 19  # groups share 21 tokens (rung 16); rows end by 27 of 40 (width 32)
  model = ModelConfig(vocab_size=40, num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2,
                      head_dim=8, mlp_dim=64, dtype="float32", param_dtype="float32")
  rng = np.random.default_rng(0)
  prompts = rng.integers(3, 40, (3, p))
  tokens = np.concatenate([np.repeat(prompts, g, axis=0), rng.integers(3, 40, (3 * g, s))], 1)
  mask = np.zeros(tokens.shape, np.int32)
  mask[:, p:p + 6] = 1
  mask[1, p + 3:] = 0
  logp = (np.log(rng.uniform(0.05, 1, tokens.shape)) * mask).astype(np.float32)
  rl = rl_config.load(dict(batch_size=3, num_generations=g, max_prompt_len=p, max_new_tokens=s,
                           logprob_chunk=4, shared_prefix=True, width_multiple=8,
                           grpo=dict(aggregation="token_mean")))
  batch = rollout_batch(rl, tokens, mask, logp, rng.uniform(size=3 * g).astype(np.float32))
  optimizer = optax.sgd(1.0)
  params = models.init_params(model, jax.random.key(0))
  outs = []
  for prefix, width in ((p, tokens.shape[1]), (16, 32), (0, 32)):
    state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                       rng=jax.random.key(1))
    step = jax.jit(make_rl_train_step(model, rl, optimizer, prefix_len=prefix))
    outs.append(step(state, trim_batch(batch, width)))
  (exact, m_exact), *others = outs
  assert float(m_exact["grad_norm"]) > 0
  for state, m in others:
    for k in ("loss", "grad_norm"):
      np.testing.assert_allclose(m[k], m_exact[k], rtol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(exact.params), jax.tree.leaves(state.params)):
      np.testing.assert_allclose(b, a, atol=1e-6)
