"""The update over a multi-turn mask: tool-response tokens (mask 0 inside the response)
carry no reward, advantage, value target, KL or loss, and GAE runs across them."""

import jax
import jax.numpy as jnp
import numpy as np

from rl_post import models
from rl_post.rl import advantages as adv_lib
from rl_post.rl import config as rl_config
from rl_post.rl.train_step import make_rl_loss, rollout_batch
from rl_post.rl.losses import totals_of

# prompt (0) | turn 1 (1) | tool response (0) | turn 2 (1) | tool response (0) | turn 3 | pad
MASK_NxT = np.array([[0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0],
                     [0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]], np.int32)


def test_last_token_is_the_last_model_token_once():
  last = np.asarray(adv_lib.last_token_NxT(jnp.asarray(MASK_NxT)))
  assert last.sum(axis=1).tolist() == [1, 1]
  assert np.flatnonzero(last[0]).tolist() == [11] and np.flatnonzero(last[1]).tolist() == [8]


def test_gae_over_holes_equals_gae_over_the_model_tokens_alone():
  rng = np.random.default_rng(0)
  r_NxT = rng.normal(size=MASK_NxT.shape).astype(np.float32) * MASK_NxT
  v_NxT = rng.normal(size=MASK_NxT.shape).astype(np.float32)
  adv, ret = adv_lib.gae(jnp.asarray(r_NxT), jnp.asarray(v_NxT), jnp.asarray(MASK_NxT),
                         gamma=0.9, lam=0.8)
  adv, ret = np.asarray(adv), np.asarray(ret)
  for n, row in enumerate(MASK_NxT):
    on = np.flatnonzero(row)
    ones = jnp.ones((1, len(on)), jnp.int32)
    want_adv, want_ret = adv_lib.gae(jnp.asarray(r_NxT[n:n + 1, on]),
                                     jnp.asarray(v_NxT[n:n + 1, on]), ones, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv[n, on], np.asarray(want_adv)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret[n, on], np.asarray(want_ret)[0], rtol=1e-5, atol=1e-6)
    assert np.all(adv[n, row == 0] == 0) and np.all(ret[n, row == 0] == 0)


def _ppo():
  section = rl_config.section_defaults()
  section.update(algorithm="ppo", num_generations=2, batch_size=1, max_new_tokens=12)
  section["ppo"] = dict(section["ppo"], kl_coef=0.1, kl_in_reward=True)
  return rl_config.load(section)


def _off_mask_noise(x, seed):
  noise = np.random.default_rng(seed).normal(size=x.shape).astype(np.float32) * 5
  return (x + noise * (MASK_NxT == 0)).astype(np.float32)


def test_ppo_batch_and_loss_ignore_tool_tokens_in_reference_and_critic_paths():
  rl = _ppo()
  rng = np.random.default_rng(1)
  config = models.ModelConfig(vocab_size=32, num_layers=1, embed_dim=16, num_heads=2,
                              num_kv_heads=1, head_dim=8, mlp_dim=32)
  params = models.init_params(config, jax.random.key(0))
  tokens = rng.integers(2, 32, size=MASK_NxT.shape).astype(np.int32)
  old_logp = (-rng.random(MASK_NxT.shape) * MASK_NxT).astype(np.float32)
  ref_logp = -rng.random(MASK_NxT.shape).astype(np.float32)
  values = rng.normal(size=MASK_NxT.shape).astype(np.float32)
  rewards = np.array([1.0, 0.0], np.float32)
  batch = rollout_batch(rl, tokens, MASK_NxT, old_logp, rewards, ref_logp_NxT=ref_logp,
                        values_NxT=values)
  noisy = rollout_batch(rl, tokens, MASK_NxT, old_logp, rewards,
                        ref_logp_NxT=_off_mask_noise(ref_logp, 2),
                        values_NxT=_off_mask_noise(values, 3))
  np.testing.assert_array_equal(batch["mask"], MASK_NxT)
  for key in ("adv", "returns"):
    assert np.all(batch[key][MASK_NxT == 0] == 0), key
    np.testing.assert_allclose(noisy[key], batch[key], rtol=1e-6, atol=1e-6, err_msg=key)
  assert np.all(batch["adv"][MASK_NxT == 1] != 0)  # credit reaches every turn
  critic = {"head": {"w": jnp.asarray(rng.normal(size=16), jnp.float32),
                     "b": jnp.float32(0.1)}}
  loss_fn = make_rl_loss(config, rl)

  def loss(b):
    b = jax.tree.map(jnp.asarray, b)
    return loss_fn(params, critic, b, totals_of(b["mask"]))

  want, want_metrics = loss(batch)
  noisy = dict(noisy, old_logp=_off_mask_noise(old_logp, 4),
               ref_logp=_off_mask_noise(ref_logp, 5), old_values=_off_mask_noise(values, 6))
  got, got_metrics = loss(noisy)
  np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
  for key in ("value_loss", "kl"):
    if key in want_metrics:
      np.testing.assert_allclose(float(got_metrics[key]), float(want_metrics[key]), rtol=1e-5,
                                 err_msg=key)
