"""GRPO maths against hand-computed numbers."""

import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.rl import advantages, losses


def test_group_advantages_hand_computed():
  rewards = jnp.array([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
  adv = advantages.group_advantages(rewards, 4, eps=0.0 + 1e-6)
  # group 1: mean 0.5, population std 0.5 -> +-1; group 2: all equal -> 0
  np.testing.assert_allclose(adv, [1, -1, -1, 1, 0, 0, 0, 0], atol=1e-5)
  adv_none = advantages.group_advantages(rewards, 4, scale="none")
  np.testing.assert_allclose(adv_none, [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
  adv3 = advantages.group_advantages(jnp.array([3.0, 0.0, 0.0]), 3)
  # mean 1, std sqrt(2): (2, -1, -1)/sqrt(2)
  np.testing.assert_allclose(adv3, np.array([2, -1, -1]) / np.sqrt(2), rtol=1e-5)


def test_group_advantages_rejects_bad_group():
  with pytest.raises(ValueError, match="do not split into groups of 3"):
    advantages.group_advantages(jnp.zeros(4), 3)
  with pytest.raises(ValueError, match="scale must be one of"):
    advantages.group_advantages(jnp.zeros(4), 2, scale="max")


def test_policy_loss_hand_computed():
  # Two sequences, three tokens; the first token of each is the prompt.
  logp = jnp.log(jnp.array([[1.0, 0.5, 0.3], [1.0, 0.2, 0.9]]))
  old = jnp.log(jnp.array([[1.0, 0.25, 0.3], [1.0, 0.4, 0.9]]))
  mask = jnp.array([[0, 1, 1], [0, 1, 0]])
  adv = jnp.array([1.0, -2.0])
  loss, m = losses.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
  # ratios: seq0 = [2.0, 1.0], seq1 = [0.5]
  # seq0 tok1: A=1, r=2 -> max(-2, -1.2) = -1.2 (clipped); tok2: r=1 -> -1
  # seq1 tok1: A=-2, r=0.5 -> max(1.0, 1.6) = 1.6 (clipped)
  np.testing.assert_allclose(loss, (-1.2 - 1.0 + 1.6) / 3, rtol=1e-6)
  np.testing.assert_allclose(m["clip_frac"], 2 / 3, rtol=1e-6)
  seq_loss, _ = losses.policy_loss(logp, old, adv, mask, aggregation="sequence_mean")
  np.testing.assert_allclose(seq_loss, ((-1.2 - 1.0) / 2 + 1.6) / 2, rtol=1e-6)
  dr_loss, _ = losses.policy_loss(logp, old, adv, mask, aggregation="sequence_sum_norm")
  np.testing.assert_allclose(dr_loss, (-1.2 - 1.0 + 1.6) / 6, rtol=1e-6)
  # clip-higher (DAPO): eps_high = 1.5 lets r = 2 through unclipped
  high, _ = losses.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=1.5)
  np.testing.assert_allclose(high, (-2.0 - 1.0 + 1.6) / 3, rtol=1e-6)


def test_kl_estimators_and_penalty():
  logp = jnp.log(jnp.array([[0.5, 0.25]]))
  ref = jnp.log(jnp.array([[0.25, 0.25]]))
  d = np.log(2.0)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k1"), [[d, 0]], rtol=1e-6)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k2"), [[d * d / 2, 0]], rtol=1e-6)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k3"), [[0.5 + d - 1, 0]], atol=1e-7)
  mask = jnp.ones((1, 2))
  adv = jnp.zeros(1)
  loss, m = losses.policy_loss(logp, logp, adv, mask, ref_logp_NxT=ref, kl_coef=0.1)
  np.testing.assert_allclose(loss, 0.1 * (0.5 + d - 1) / 2, rtol=1e-5)
  np.testing.assert_allclose(m["kl"], (0.5 + d - 1) / 2, rtol=1e-5)
  with pytest.raises(ValueError, match="kl_coef > 0 needs ref_logp_NxT"):
    losses.policy_loss(logp, logp, adv, mask, kl_coef=0.1)


def test_policy_gradient_direction():
  """Positive advantage raises the log-prob of the sampled tokens."""
  import jax
  old = jnp.log(jnp.full((1, 3), 0.3))
  mask = jnp.array([[0, 1, 1]])
  grad = jax.grad(lambda lp: losses.policy_loss(lp, old, jnp.array([1.0]), mask)[0])(old)
  assert grad[0, 0] == 0 and (grad[0, 1:] < 0).all()
