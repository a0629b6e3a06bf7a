"""Advantage estimators against plain numpy transcriptions of their papers' formulas."""

import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.rl import advantages as adv_lib

RNG = np.random.default_rng(0)


def _rollout(n=6, t=9):
  """Random rewards and right-aligned response masks of varied lengths (some ragged)."""
  mask = np.zeros((n, t), np.int32)
  for i in range(n):
    start = int(RNG.integers(1, 4))
    mask[i, start:start + int(RNG.integers(1, t - start + 1))] = 1
  return RNG.normal(size=n).astype(np.float32), mask


def _np_grpo(r, g, scale, eps=1e-6):
  out = np.zeros_like(r)
  for k in range(0, len(r), g):
    grp = r[k:k + g]
    out[k:k + g] = (grp - grp.mean()) / ((np.sqrt(((grp - grp.mean()) ** 2).mean()) + eps)
                                         if scale == "std" else 1.0)
  return out


@pytest.mark.parametrize("scale", ["std", "none"])
def test_group_advantages(scale):
  r, _ = _rollout(8)
  np.testing.assert_allclose(adv_lib.group_advantages(jnp.asarray(r), 4, scale=scale),
                             _np_grpo(r, 4, scale), rtol=1e-5, atol=1e-6)


def test_rloo_leave_one_out():
  r, _ = _rollout(9)
  want = np.zeros_like(r)
  for i in range(9):
    others = [r[j] for j in range(i // 3 * 3, i // 3 * 3 + 3) if j != i]
    want[i] = r[i] - np.mean(others)
  np.testing.assert_allclose(adv_lib.rloo_advantages(jnp.asarray(r), 3), want, rtol=1e-5,
                             atol=1e-6)
  with pytest.raises(ValueError, match="groups of >= 2"):
    adv_lib.rloo_advantages(jnp.asarray(r), 1)


def test_zero_variance_groups():
  keep = adv_lib.zero_variance_groups(jnp.array([1.0, 1.0, 0.0, 1.0, 2.0, 2.0]), 2)
  np.testing.assert_array_equal(keep, [0, 0, 1, 1, 0, 0])


def _np_token_rewards(r, mask, process, kl, beta):
  out = np.zeros(mask.shape, np.float32)
  for i in range(mask.shape[0]):
    idx = np.nonzero(mask[i])[0]
    out[i, idx] += process[i, idx] - beta * kl[i, idx]
    out[i, idx[-1]] += r[i]
  return out


def test_token_and_sequence_rewards():
  r, mask = _rollout()
  process = RNG.normal(size=mask.shape).astype(np.float32)
  kl = RNG.normal(size=mask.shape).astype(np.float32)
  want = _np_token_rewards(r, mask, process, kl, 0.1)
  got = adv_lib.token_rewards(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(process),
                              jnp.asarray(kl), 0.1)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  seq = adv_lib.sequence_rewards(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(process),
                                 jnp.asarray(kl), 0.1)
  np.testing.assert_allclose(seq, want.sum(axis=1), rtol=1e-5, atol=1e-5)


def _np_reward_to_go(rew, mask, gamma):
  out = np.zeros_like(rew)
  for i in range(rew.shape[0]):
    running = 0.0
    for t in reversed(np.nonzero(mask[i])[0]):
      running = rew[i, t] + gamma * running
      out[i, t] = running
  return out


def test_reinforce_pp_batch_normalised_returns():
  r, mask = _rollout()
  kl = np.abs(RNG.normal(size=mask.shape)).astype(np.float32)
  rew = _np_token_rewards(r, mask, np.zeros_like(kl), kl, 0.05)
  g = _np_reward_to_go(rew, mask, 0.9)
  sel = mask.astype(bool)
  want = np.where(sel, (g - g[sel].mean()) / np.sqrt(g[sel].var() + 1e-8), 0.0)
  got = adv_lib.reinforce_pp_advantages(jnp.asarray(rew), jnp.asarray(mask), 0.9)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _np_gae(rew, values, mask, gamma, lam):
  adv = np.zeros_like(rew)
  for i in range(rew.shape[0]):
    idx = list(np.nonzero(mask[i])[0])
    last = 0.0
    for k in reversed(range(len(idx))):
      t = idx[k]
      next_v = values[i, idx[k + 1]] if k + 1 < len(idx) else 0.0
      delta = rew[i, t] + gamma * next_v - values[i, t]
      last = delta + gamma * lam * last
      adv[i, t] = last
  return adv, np.where(mask > 0, adv + values, 0.0)


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0)])
def test_gae_reverse_scan(gamma, lam):
  r, mask = _rollout()
  values = RNG.normal(size=mask.shape).astype(np.float32)
  rew = _np_token_rewards(r, mask, RNG.normal(size=mask.shape).astype(np.float32),
                          np.zeros_like(values), 0.0)
  want_adv, want_ret = _np_gae(rew, values, mask, gamma, lam)
  adv, ret = adv_lib.gae(jnp.asarray(rew), jnp.asarray(values), jnp.asarray(mask), gamma=gamma,
                         lam=lam)
  np.testing.assert_allclose(adv, want_adv, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(ret, want_ret, rtol=1e-4, atol=1e-5)


def test_gae_with_lambda_one_and_zero_values_is_reward_to_go():
  r, mask = _rollout()
  rew = _np_token_rewards(r, mask, np.zeros(mask.shape, np.float32),
                          np.zeros(mask.shape, np.float32), 0.0)
  np.testing.assert_allclose(adv_lib.reward_to_go(jnp.asarray(rew), jnp.asarray(mask)),
                             _np_reward_to_go(rew, mask, 1.0), rtol=1e-5, atol=1e-6)


def test_overlong_penalty_piecewise():
  lengths = np.array([0, 10, 12, 14, 16, 20])
  l_max, l_cache = 16, 4
  want = [0.0 if n <= l_max - l_cache else
          (l_max - l_cache - n) / l_cache if n <= l_max else -1.0 for n in lengths]
  np.testing.assert_allclose(adv_lib.overlong_penalty(jnp.asarray(lengths), l_max, l_cache),
                             want, rtol=1e-6)
  np.testing.assert_allclose(adv_lib.overlong_penalty(jnp.asarray(lengths), l_max, 0), 0.0)
