"""Off-policy correction (TIS, MIS) against numpy transcriptions, through every algorithm."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.rl import config as rl_config
from rl_post.rl import losses, off_policy, registry
from rl_post.rl.algorithm import LossInputs
from rl_post.rl.train_step import batch_ndims, rollout_batch

RNG = np.random.default_rng(7)


def _batch(n=6, t=9):
  mask = np.zeros((n, t), np.float32)
  for i in range(n):
    start = int(RNG.integers(1, 3))
    mask[i, start:start + int(RNG.integers(1, t - start + 1))] = 1
  logp = np.log(RNG.uniform(0.05, 1.0, (n, t))).astype(np.float32) * mask
  old = (logp + RNG.normal(0, 0.3, (n, t))).astype(np.float32) * mask
  behaviour = (old + RNG.normal(0, 0.5, (n, t))).astype(np.float32) * mask
  adv = RNG.normal(size=(n, t)).astype(np.float32)
  return logp, old, behaviour, adv, mask


def _np_weight(old, behaviour, mask, cap, lo, hi):
  """w_t = min(pi_old / mu, C) (C > 0), zero outside [lo, hi] (hi > 0); 1 off the mask."""
  r = np.exp(np.where(mask > 0, old.astype(np.float64) - behaviour, 0.0))
  w = np.minimum(r, cap) if cap > 0 else np.ones_like(r)
  if hi > 0:
    w = np.where((r >= lo) & (r <= hi), w, 0.0)
  return w


def _np_loss(logp, old, adv, mask, w, how, eps=0.2):
  r = np.exp((logp.astype(np.float64) - old) * mask)
  per_token = -np.minimum(r * adv, np.clip(r, 1 - eps, 1 + eps) * adv) * w
  if how == "token_mean":
    return (per_token * mask).sum() / mask.sum()
  if how == "sequence_mean":
    return np.mean([(per_token[i] * mask[i]).sum() / mask[i].sum() for i in range(len(mask))])
  return (per_token * mask).sum() / (mask.shape[0] * mask.shape[1])


@pytest.mark.parametrize("cap,lo,hi", [(2.0, 0.0, 0.0), (1.2, 0.0, 0.0), (0.0, 0.5, 1.5),
                                       (1.5, 0.7, 1.4)])
def test_importance_weight_matches_numpy(cap, lo, hi):
  _, old, behaviour, _, mask = _batch()
  got = off_policy.importance_weight_NxT(jnp.asarray(old), jnp.asarray(behaviour),
                                         jnp.asarray(mask), tis_cap=cap, mis_low=lo,
                                         mis_high=hi)
  np.testing.assert_allclose(got, _np_weight(old, behaviour, mask, cap, lo, hi), rtol=1e-6)


@pytest.mark.parametrize("how", losses.AGGREGATIONS)
def test_weighted_policy_loss_matches_numpy(how):
  logp, old, behaviour, adv, mask = _batch()
  w = _np_weight(old, behaviour, mask, 1.5, 0.0, 0.0).astype(np.float32)
  got, metrics = losses.policy_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                                    jnp.asarray(mask), aggregation=how,
                                    is_weight_NxT=jnp.asarray(w))
  np.testing.assert_allclose(got, _np_loss(logp, old, adv, mask, w, how), rtol=1e-5)
  np.testing.assert_allclose(metrics["is_weight_mean"], (w * mask).sum() / mask.sum(),
                             rtol=1e-6)
  # the gradient goes through logp only, scaled per token by w
  grad = jax.grad(lambda lp: losses.policy_loss(lp, jnp.asarray(old), jnp.asarray(adv),
                                                jnp.asarray(mask), aggregation=how,
                                                is_weight_NxT=jnp.asarray(w))[0])
  plain = jax.grad(lambda lp: losses.policy_loss(lp, jnp.asarray(old), jnp.asarray(adv),
                                                 jnp.asarray(mask), aggregation=how)[0])
  np.testing.assert_allclose(grad(jnp.asarray(logp)), w * plain(jnp.asarray(logp)),
                             rtol=1e-5, atol=1e-7)


def test_no_weight_is_the_unweighted_loss():
  logp, old, _, adv, mask = _batch()
  args = tuple(map(jnp.asarray, (logp, old, adv, mask)))
  plain, m_plain = losses.policy_loss(*args)
  ones, _ = losses.policy_loss(*args, is_weight_NxT=jnp.ones_like(args[0]))
  assert float(plain) == float(ones) and "is_weight_mean" not in m_plain


@pytest.mark.parametrize("name", registry.names())
def test_every_algorithm_applies_the_weight(name):
  """A constant weight c scales every registry algorithm's policy-gradient term by c."""
  logp, old, _, adv, mask = _batch()
  cfg = registry.get(name).config_cls()
  base = LossInputs(jnp.asarray(logp), jnp.zeros_like(jnp.asarray(logp)), jnp.asarray(old),
                    jnp.asarray(adv), jnp.asarray(mask), jnp.asarray(old))
  _, plain = registry.get(name).loss(cfg, base, losses.totals_of(base.mask_NxT))
  weighted = base._replace(is_weight_NxT=jnp.full(logp.shape, 2.5, jnp.float32))
  _, scaled = registry.get(name).loss(cfg, weighted, losses.totals_of(base.mask_NxT))
  np.testing.assert_allclose(scaled["pg_loss"], 2.5 * plain["pg_loss"], rtol=1e-5)


def test_gap_metrics_match_numpy():
  _, old, behaviour, _, mask = _batch()
  got = off_policy.gap_metrics(old, behaviour, mask, tis_cap=1.5, mis_low=0.5, mis_high=2.0)
  d = (old.astype(np.float64) - behaviour)[mask > 0]
  r = np.exp(d)
  want = {"offpolicy/logp_abs_diff_mean": np.abs(d).mean(),
          "offpolicy/logp_abs_diff_max": np.abs(d).max(), "offpolicy/ratio_mean": r.mean(),
          "offpolicy/ratio_min": r.min(), "offpolicy/ratio_max": r.max(),
          "offpolicy/kl_k3": (r - d - 1).mean(), "offpolicy/tis_clip_frac": (r > 1.5).mean(),
          "offpolicy/mis_drop_frac": ((r < 0.5) | (r > 2.0)).mean()}
  assert set(got) == set(want)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-9, err_msg=k)
  same = off_policy.gap_metrics(old, old, mask)
  assert same["offpolicy/logp_abs_diff_max"] == 0 and same["offpolicy/ratio_mean"] == 1


def test_rollout_batch_takes_the_trainers_logp_and_weights():
  _, old, behaviour, _, mask = _batch(n=8)
  tokens = RNG.integers(0, 50, mask.shape).astype(np.int32)
  rewards = RNG.random(8).astype(np.float32)
  rl = rl_config.load(dict(batch_size=2, num_generations=4, tis_cap=1.5))
  assert set(batch_ndims(rl)) == {"tokens", "mask", "old_logp", "adv", "is_weight"}
  batch = rollout_batch(rl, tokens, mask.astype(np.int32), behaviour, rewards,
                        trainer_logp_NxT=old)
  np.testing.assert_array_equal(batch["old_logp"], old)
  np.testing.assert_allclose(batch["is_weight"], _np_weight(old, behaviour, mask, 1.5, 0, 0),
                             rtol=1e-6)
  with pytest.raises(ValueError, match="need the trainer's log-probs"):
    rollout_batch(rl, tokens, mask.astype(np.int32), behaviour, rewards)


def test_defaults_change_nothing():
  rl = rl_config.load({})
  assert (rl.rollout_precision, rl.tis_cap, rl.mis_high) == ("float32", 0.0, 0.0)
  assert not rl.recomputes_logp and not rl.corrects_off_policy
  assert set(batch_ndims(rl)) == {"tokens", "mask", "old_logp", "adv"}


@pytest.mark.parametrize("fields,message", [
    (dict(rollout_precision="fp8"), "rl.rollout_precision must be one of ('float32', "
     "'bfloat16', 'int8'), got 'fp8'"),
    (dict(tis_cap=-1.0), "rl.tis_cap must be >= 0 (0 = off), got -1.0"),
    (dict(mis_high=-2.0), "rl.mis_high must be >= 0 (0 = off), got -2.0"),
    (dict(mis_low=1.2, mis_high=2.0), "rl.mis_low and rl.mis_high must satisfy"),
])
def test_bad_values_get_one_line_errors(fields, message):
  with pytest.raises(ValueError) as info:
    rl_config.load(fields)
  assert message in str(info.value) and "\n" not in str(info.value)
