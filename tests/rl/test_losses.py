"""Losses against plain numpy transcriptions of the papers' formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.rl import losses

RNG = np.random.default_rng(1)


def _batch(n=5, t=7):
  mask = np.zeros((n, t), np.float32)
  for i in range(n):
    start = int(RNG.integers(1, 3))
    mask[i, start:start + int(RNG.integers(1, t - start + 1))] = 1
  logp = np.log(RNG.uniform(0.05, 1.0, (n, t))).astype(np.float32)
  old = (logp + RNG.normal(0, 0.4, (n, t))).astype(np.float32)
  adv = RNG.normal(size=(n, t)).astype(np.float32)
  return logp, old, adv, mask


def _np_aggregate(x, mask, how):
  if how == "token_mean":
    return (x * mask).sum() / mask.sum()
  if how == "sequence_mean":
    return np.mean([(x[i] * mask[i]).sum() / mask[i].sum() for i in range(len(x))])
  return (x * mask).sum() / (x.shape[0] * x.shape[1])


def _np_ppo_token(logp, old, adv, eps_low, eps_high, dual=0.0):
  r = np.exp(logp - old)
  obj = np.minimum(r * adv, np.clip(r, 1 - eps_low, 1 + eps_high) * adv)
  if dual:
    obj = np.where(adv < 0, np.maximum(obj, dual * adv), obj)
  return -obj


@pytest.mark.parametrize("how", ["token_mean", "sequence_mean", "sequence_sum_norm"])
@pytest.mark.parametrize("eps_low,eps_high,dual", [(0.2, 0.2, 0.0), (0.2, 0.28, 0.0),
                                                   (0.1, 0.3, 3.0)])
def test_clipped_ratio_loss(how, eps_low, eps_high, dual):
  logp, old, adv, mask = _batch()
  want = _np_aggregate(_np_ppo_token(logp, old, adv, eps_low, eps_high, dual), mask, how)
  got, m = losses.policy_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                              jnp.asarray(mask), clip_low=eps_low, clip_high=eps_high,
                              dual_clip=dual, aggregation=how)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(m["ratio_mean"], _np_aggregate(np.exp(logp - old), mask,
                                                            "token_mean"), rtol=1e-5)


def test_dual_clip_bounds_negative_advantage_loss():
  logp, old = jnp.log(jnp.array([[1.0, 0.9]])), jnp.log(jnp.array([[1.0, 0.09]]))  # r = 10
  adv, mask = jnp.array([[0.0, -1.0]]), jnp.array([[0, 1]])
  plain, _ = losses.policy_loss(logp, old, adv, mask)
  dual, m = losses.policy_loss(logp, old, adv, mask, dual_clip=3.0)
  np.testing.assert_allclose([plain, dual], [10.0, 3.0], rtol=1e-5)
  assert m["clip_frac"] == 1.0


def test_gspo_sequence_ratio():
  logp, old, adv, mask = _batch()
  adv_n = adv[:, 0]
  s = np.exp([((logp[i] - old[i]) * mask[i]).sum() / mask[i].sum() for i in range(len(mask))])
  obj = np.minimum(s * adv_n, np.clip(s, 1 - 3e-4, 1 + 4e-4) * adv_n)
  got, _ = losses.policy_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv_n),
                              jnp.asarray(mask), clip_low=3e-4, clip_high=4e-4,
                              ratio_level="sequence", aggregation="sequence_mean")
  np.testing.assert_allclose(got, -obj.mean(), rtol=1e-5)
  # the gradient flows through the length-normalised sequence log-ratio
  grad = jax.grad(lambda lp: losses.policy_loss(
      lp, jnp.asarray(logp), jnp.asarray(adv_n), jnp.asarray(mask), ratio_level="sequence",
      aggregation="sequence_mean")[0])(jnp.asarray(logp))
  want = -adv_n[:, None] * mask / mask.sum(1, keepdims=True) / len(mask)
  np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_in_loss_and_entropy_bonus(estimator):
  logp, old, adv, mask = _batch()
  ref = (logp + RNG.normal(0, 0.3, logp.shape)).astype(np.float32)
  entropy = RNG.uniform(0, 2, logp.shape).astype(np.float32)
  lr = logp - ref
  kl = {"k1": lr, "k2": 0.5 * lr ** 2, "k3": np.exp(-lr) + lr - 1}[estimator]
  want = _np_aggregate(_np_ppo_token(logp, old, adv, 0.2, 0.2) + 0.1 * kl - 0.01 * entropy,
                       mask, "sequence_mean")
  got, m = losses.policy_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                              jnp.asarray(mask), ref_logp_NxT=jnp.asarray(ref),
                              entropy_NxT=jnp.asarray(entropy), kl_coef=0.1,
                              kl_estimator=estimator, entropy_coef=0.01,
                              aggregation="sequence_mean")
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(m["kl"], _np_aggregate(kl, mask, "token_mean"), rtol=1e-5)
  with pytest.raises(ValueError, match="entropy_coef > 0 needs entropy_NxT"):
    losses.policy_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                       jnp.asarray(mask), entropy_coef=0.1)


@pytest.mark.parametrize("clip", [0.0, 0.2])
def test_clipped_value_loss(clip):
  _, _, _, mask = _batch()
  v, v_old, ret = (RNG.normal(size=mask.shape).astype(np.float32) for _ in range(3))
  err = (v - ret) ** 2
  if clip:
    err = np.maximum(err, (v_old + np.clip(v - v_old, -clip, clip) - ret) ** 2)
  got, _ = losses.value_loss(jnp.asarray(v), jnp.asarray(v_old), jnp.asarray(ret),
                             jnp.asarray(mask), value_clip=clip)
  np.testing.assert_allclose(got, 0.5 * _np_aggregate(err, mask, "token_mean"), rtol=1e-5)


@pytest.mark.parametrize("how", ["token_mean", "sequence_mean", "sequence_sum_norm"])
def test_micro_batch_losses_sum_to_the_batch_loss(how):
  """With the whole batch's Totals, per-micro-batch losses add up (exact accumulation)."""
  logp, old, adv, mask = (jnp.asarray(x) for x in _batch(n=6))
  whole, _ = losses.policy_loss(logp, old, adv, mask, aggregation=how)
  totals = losses.totals_of(mask)
  parts = [losses.policy_loss(logp[s], old[s], adv[s], mask[s], aggregation=how,
                              totals=totals)[0] for s in (slice(0, 2), slice(2, 6))]
  np.testing.assert_allclose(sum(parts), whole, rtol=1e-5)
