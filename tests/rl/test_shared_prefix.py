"""rl.shared_prefix: each group's prompt through the layers once; same numbers as per row."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_post import models
from rl_post.metrics.writers import read_metrics
from rl_post.rl import config as rl_config
from rl_post.rl import trainer
from rl_post.models.logprobs import hidden_states
from rl_post.rl import train_step
from rl_post.rl.train_step import (make_ref_logprobs, make_rl_train_step, prefix_rung,
                                   rollout_batch, shared_prefix_len)
from rl_post.training.state import TrainState
from tiny_grpo import tiny_digit_config
from run_metrics import MEASURED

VOLATILE = MEASURED
P, G, L, S = 3, 4, 16, 7  # prompts, group, shared prompt, response budget


def _model(**kw):
  return models.ModelConfig(num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, head_dim=8,
                            mlp_dim=64, vocab_size=64, attention_impl="xla", **kw)


def _grouped_tokens(seed=0):
  rng = np.random.default_rng(seed)
  prompts = np.repeat(rng.integers(4, 64, (P, L)), G, axis=0)
  return np.concatenate([prompts, rng.integers(4, 64, (P * G, S))], 1).astype(np.int32)


@pytest.mark.parametrize("remat,prefix_len", [("none", L), ("full", L), ("none", 8)])
def test_hidden_states_and_their_gradient_equal_the_per_row_forward(remat, prefix_len):
  # prefix_len 8: a shorter rung than the prompt (the rest of it runs per row)
  config = _model(qkv_bias=True)
  params = models.init_params(config, jax.random.key(0))
  tokens = jnp.asarray(_grouped_tokens())
  plain = hidden_states(config, params, tokens, remat=remat)
  shared = hidden_states(config, params, tokens, remat=remat, shared_prefix=(prefix_len, G))
  assert shared.shape == plain.shape == (P * G, L + S, 32)
  np.testing.assert_allclose(shared, plain, atol=2e-5)
  direction = jax.random.normal(jax.random.key(1), plain.shape)

  def grads(prefix):
    loss = lambda p: (hidden_states(config, p, tokens, remat=remat, shared_prefix=prefix)
                      * direction).sum()
    return jax.grad(loss)(params)

  want, got = grads(None), grads((prefix_len, G))
  for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
    scale = float(jnp.abs(w).max())
    assert scale > 0, jax.tree_util.keystr(path)
    np.testing.assert_allclose(g, w, atol=2e-5 * scale, err_msg=jax.tree_util.keystr(path))


def test_a_different_suffix_does_not_leak_into_the_prefix_or_other_rows():
  config = _model()
  params = models.init_params(config, jax.random.key(0))
  tokens = _grouped_tokens()
  changed = tokens.copy()
  changed[1, L + 2] = (changed[1, L + 2] + 1) % 60 + 4  # one response token of row 1
  a = hidden_states(config, params, jnp.asarray(tokens), shared_prefix=(L, G))
  b = hidden_states(config, params, jnp.asarray(changed), shared_prefix=(L, G))
  rows_equal = np.all(np.isclose(a, b, atol=1e-6), axis=(2,))
  assert rows_equal[:, :L + 2].all()  # causal: earlier positions never see it
  assert rows_equal[[0, 2, 3, 4]].all()  # other rows, even of the same group
  assert not rows_equal[1, L + 2:].any()


def _rl(**kw):
  return rl_config.load(dict(batch_size=P, num_generations=G, max_prompt_len=L,
                             max_new_tokens=S, logprob_chunk=4,
                             grpo=dict(kl_coef=0.04, aggregation="token_mean"), **kw))


def _batch(rl, tokens):
  rng = np.random.default_rng(1)
  mask = np.zeros(tokens.shape, np.int32)
  mask[:, L:] = 1
  mask[2, L + 4:] = 0  # a shorter response
  logp = (np.log(rng.uniform(0.05, 1, tokens.shape)) * mask).astype(np.float32)
  rewards = rng.uniform(size=tokens.shape[0]).astype(np.float32)
  return rollout_batch(rl, tokens, mask, logp, rewards, ref_logp_NxT=logp * 0.9)


@pytest.mark.parametrize("grad_accum", [1, 3])
def test_update_and_reference_equal_the_per_row_ones(grad_accum):
  config = _model()
  tokens = _grouped_tokens()
  # plain SGD at rate 1: the parameters move by the gradient itself (Adam's first
  # step is about lr * sign(g), which magnifies rounding-level gradients)
  optimizer = optax.sgd(1.0)
  params = models.init_params(config, jax.random.key(0))
  outs = {}
  for shared in (False, True):
    rl = _rl(shared_prefix=shared, grad_accum=grad_accum)
    prefix = shared_prefix_len(rl, tokens)
    assert prefix == (L if shared else 0)
    ref = jax.jit(make_ref_logprobs(config, rl, prefix_len=prefix))(params, tokens)
    state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                       rng=jax.random.key(1))
    step = jax.jit(make_rl_train_step(config, rl, optimizer, prefix_len=prefix))
    state, metrics = step(state, _batch(rl, tokens))
    outs[shared] = (ref, state.params, metrics)
  (ref_a, params_a, m_a), (ref_b, params_b, m_b) = outs[False], outs[True]
  np.testing.assert_allclose(ref_b, ref_a, atol=2e-5)
  assert float(m_a["grad_norm"]) > 0
  for k in ("loss", "grad_norm", "entropy", "kl"):
    if k in m_a:
      np.testing.assert_allclose(m_b[k], m_a[k], rtol=1e-4, err_msg=k)
  for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params_b)):
    np.testing.assert_allclose(b, a, atol=1e-5)


@pytest.mark.parametrize("shared", [False, True])
def test_reference_with_the_loss_mask_skips_prompt_chunks_only(shared):
  """The trainer passes the loss mask: trained entries are unchanged, prompt-only
  chunks (every row's mask 0) are not computed and read 0."""
  config, tokens = _model(), _grouped_tokens()
  params = models.init_params(config, jax.random.key(0))
  rl = _rl(shared_prefix=shared)
  mask = np.asarray(_batch(rl, tokens)["mask"])
  ref = jax.jit(make_ref_logprobs(config, rl, prefix_len=shared_prefix_len(rl, tokens)))
  full, masked = np.asarray(ref(params, tokens)), np.asarray(ref(params, tokens, mask))
  trained = mask > 0
  np.testing.assert_allclose(masked[trained], full[trained], rtol=1e-6, atol=1e-6)
  # chunks of 4 end at T - 1 = 22: positions 1..14 are whole prompt chunks, 15..18 is live
  assert np.abs(masked[:, 1:15]).max() == 0.0 and np.abs(full[:, 1:15]).min() > 0
  np.testing.assert_allclose(masked[:, 15:], full[:, 15:], rtol=1e-6, atol=1e-6)


def test_shared_length_is_the_shortest_common_group_prefix_in_granules():
  rl = _rl(shared_prefix=True)
  tokens = np.concatenate([_grouped_tokens(), _grouped_tokens(1)[:, :17]], axis=1)  # T = 40
  assert shared_prefix_len(rl, tokens) == 16
  tokens[G:2 * G, 16:20] = 9  # group 1's rows also agree on 4 response tokens: still 16
  assert shared_prefix_len(rl, tokens) == 16
  tokens[:, :34] = 7  # every group shares 34 positions: rung 32
  assert shared_prefix_len(rl, tokens) == 32
  tokens[G + 1, 15] += 1  # one row of group 1 differs at 15: 8, a multiple of 8 below 32
  assert shared_prefix_len(rl, tokens) == 8
  tokens[G + 1, 7] += 1  # and at 7 < 8: nothing is shared
  assert shared_prefix_len(rl, tokens) == 0
  assert shared_prefix_len(_rl(), _grouped_tokens()) == 0  # off
  assert shared_prefix_len(rl, _grouped_tokens()[:6]) == 0  # not whole groups
  same = np.full((P * G, 20), 5)
  assert shared_prefix_len(rl, same) == 16  # identical rows keep >= 1 own position


def test_prefix_rungs_are_multiples_of_8_to_32_then_1_5x_apart():
  assert [prefix_rung(n) for n in (0, 7, 8, 15, 23, 24, 31, 32, 47, 48, 100, 250)] == [
      0, 0, 8, 8, 16, 24, 24, 32, 32, 48, 96, 192]
  rl = _rl(shared_prefix=True, prefix_buckets=(10, 20))
  assert [prefix_rung(n, rl) for n in (9, 10, 19, 20, 100)] == [0, 10, 10, 20, 20]


def test_config_needs_groups_and_whole_groups_per_micro_batch():
  with pytest.raises(ValueError, match="minibatch_size / grad_accum \\(6\\) must be a multiple"):
    _rl(shared_prefix=True, grad_accum=2)
  with pytest.raises(ValueError, match="shared_prefix"):
    rl_config.load(dict(algorithm="ppo", num_generations=1, shared_prefix=True))
  with pytest.raises(ValueError, match="must be a bool"):
    _rl(shared_prefix=1)


def test_minibatches_shuffle_whole_groups():
  rl = _rl(shared_prefix=True, num_minibatches=3, num_epochs=2)
  batch = {"tokens": np.arange(P * G)[:, None]}
  parts = train_step.minibatches(batch, rl, jax.random.key(0))
  assert len(parts) == 6
  orders = [np.concatenate([p["tokens"][:, 0] for p in parts[e * 3:(e + 1) * 3]])
            for e in range(2)]
  for order in orders:
    assert sorted(order) == list(range(P * G))
    groups = order.reshape(-1, G)
    assert (groups == groups[:, :1] + np.arange(G)).all() and (groups[:, 0] % G == 0).all()
  assert not (orders[0] == orders[1]).all()


def _config(tokenizer_path, shared: bool):
  return tiny_digit_config(tokenizer_path, num_steps=2, shared_prefix=shared)


def test_a_run_with_shared_prefix_logs_the_numbers_of_one_without(tokenizer_path, tmp_path):
  trainer.train(_config(tokenizer_path, True), str(tmp_path / "shared"))
  trainer.train(_config(tokenizer_path, False), str(tmp_path / "rows"))

  def stable(name):
    return [{k: v for k, v in m.items() if not k.startswith(VOLATILE)}
            for m in read_metrics(str(tmp_path / name))]

  shared, rows = stable("shared"), stable("rows")
  assert [m["step"] for m in shared] == [1, 2]
  # every arithmetic prompt here is longer than 16 tokens: 16 positions run once per group
  assert [m.pop("rollout/shared_prefix_len") for m in shared] == [16.0, 16.0]
  for a, b in zip(shared, rows):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-3, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("shared", [False, True])
def test_unrolled_layers_give_the_scanned_update(shared):
  """rl.unroll_layers changes how XLA loops over layers, not the update."""
  config = models.ModelConfig(num_layers=3, embed_dim=32, num_heads=4, num_kv_heads=2,
                              head_dim=8, mlp_dim=64, vocab_size=64, attention_impl="xla")
  params = models.init_params(config, jax.random.key(0))
  tokens = _grouped_tokens()
  mask = np.zeros_like(tokens)
  mask[:, L:] = 1
  rewards = np.random.default_rng(1).random(P * G).astype(np.float32)
  results = {}
  for unroll in (1, 2, 3, 8):
    rl = rl_config.load(dict(batch_size=P, num_generations=G, max_prompt_len=L,
                             max_new_tokens=S, logprob_chunk=4, shared_prefix=shared,
                             unroll_layers=unroll, grpo=dict(kl_coef=0.04)))
    prefix = shared_prefix_len(rl, tokens)
    assert prefix == (L if shared else 0)
    ref = make_ref_logprobs(config, rl, prefix_len=prefix)(params, jnp.asarray(tokens))
    batch = rollout_batch(rl, tokens, mask, np.asarray(ref) * mask, rewards,
                          ref_logp_NxT=np.asarray(ref) * mask)
    optimizer = optax.adam(1e-3)
    state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                       rng=jax.random.key(1))
    new, metrics = jax.jit(make_rl_train_step(config, rl, optimizer, prefix_len=prefix))(
        state, batch)
    results[unroll] = (float(metrics["loss"]), float(metrics["grad_norm"]), new.params)
  loss, norm, want = results[1]
  assert norm > 0
  for unroll in (2, 3, 8):
    got_loss, got_norm, got = results[unroll]
    np.testing.assert_allclose([got_loss, got_norm], [loss, norm], rtol=1e-5, atol=1e-7)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
      np.testing.assert_allclose(g, w, atol=1e-6)
