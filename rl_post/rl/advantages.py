"""Advantage estimators as small pure functions over jnp arrays.

N = B prompts x G generations; rows [g*G, (g+1)*G) are one prompt's group.
Token arrays [N, T] are aligned with the token sequence; `mask_NxT` is 1 on
response tokens. Sequence-level estimators (GRPO, Dr.GRPO, RLOO) return
adv_N; token-level ones (REINFORCE++, GAE) return adv_NxT.
"""

import jax
import jax.numpy as jnp

SCALES = ("std", "none")


def _groups(x_N, group_size: int):
  if group_size < 1 or x_N.shape[0] % group_size:
    raise ValueError(f"{x_N.shape[0]} rewards do not split into groups of {group_size}")
  return x_N.astype(jnp.float32).reshape(-1, group_size)


def group_advantages(rewards_N, group_size: int, *, scale: str = "std", eps: float = 1e-6):
  """GRPO: A_i = (r_i - mean(r_group)) / (std(r_group) + eps), population std.

  scale="none" drops the division (Dr. GRPO). Returns adv_N, float32.
  """
  if scale not in SCALES:
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
  r_MxG = _groups(rewards_N, group_size)
  adv_MxG = r_MxG - r_MxG.mean(axis=1, keepdims=True)
  if scale == "std":
    adv_MxG = adv_MxG / (r_MxG.std(axis=1, keepdims=True) + eps)
  return adv_MxG.reshape(-1)


def rloo_advantages(rewards_N, group_size: int):
  """RLOO (Ahmadian et al. 2024): A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r)."""
  if group_size < 2:
    raise ValueError(f"RLOO needs groups of >= 2, got {group_size}")
  r_MxG = _groups(rewards_N, group_size)
  loo_MxG = (r_MxG.sum(axis=1, keepdims=True) - r_MxG) / (group_size - 1)
  return (r_MxG - loo_MxG).reshape(-1)


def zero_variance_groups(rewards_N, group_size: int):
  """keep_N: 0 for members of groups whose rewards are all equal (DAPO's filter)."""
  r_MxG = _groups(rewards_N, group_size)
  varied_M = (r_MxG.max(axis=1) > r_MxG.min(axis=1)).astype(jnp.float32)
  return jnp.repeat(varied_M, group_size)


def last_token_NxT(mask_NxT):
  """1 on each sequence's last response token (where the outcome reward lands).

  The last 1 of the row, so a mask with holes (a multi-turn episode, whose
  tool responses have mask 0) gets the reward once, at the end.
  """
  mask_NxT = mask_NxT.astype(jnp.float32)
  later_NxT = jnp.flip(jnp.cumsum(jnp.flip(mask_NxT, 1), 1), 1) - mask_NxT  # 1s after t
  return mask_NxT * (later_NxT == 0)


def token_rewards(rewards_N, mask_NxT, process_NxT=None, kl_NxT=None, kl_coef: float = 0.0):
  """Dense reward r_t: outcome at the last response token, plus process rewards, minus beta KL_t."""
  mask_NxT = mask_NxT.astype(jnp.float32)
  r_NxT = last_token_NxT(mask_NxT) * rewards_N.astype(jnp.float32)[:, None]
  if process_NxT is not None:
    r_NxT = r_NxT + process_NxT * mask_NxT
  if kl_NxT is not None and kl_coef > 0:
    r_NxT = r_NxT - kl_coef * kl_NxT * mask_NxT
  return r_NxT


def sequence_rewards(rewards_N, mask_NxT, process_NxT=None, kl_NxT=None, kl_coef: float = 0.0):
  """R_i = outcome + sum of process rewards - beta sum_t KL_t (what sequence estimators see)."""
  mask_NxT = mask_NxT.astype(jnp.float32)
  r_N = rewards_N.astype(jnp.float32)
  if process_NxT is not None:
    r_N = r_N + (process_NxT * mask_NxT).sum(axis=1)
  if kl_NxT is not None and kl_coef > 0:
    r_N = r_N - kl_coef * (kl_NxT * mask_NxT).sum(axis=1)
  return r_N


def reward_to_go(r_NxT, mask_NxT, gamma: float = 1.0):
  """G_t = sum_{s >= t} gamma^(s-t) r_s over response tokens (reverse scan)."""
  return gae(r_NxT, jnp.zeros_like(r_NxT), mask_NxT, gamma=gamma, lam=1.0)[0]


def masked_whiten(x_NxT, mask_NxT, eps: float = 1e-8):
  """(x - mean) / std over all masked entries of the batch (REINFORCE++, PPO)."""
  mask_NxT = mask_NxT.astype(jnp.float32)
  count = jnp.maximum(mask_NxT.sum(), 1.0)
  mean = (x_NxT * mask_NxT).sum() / count
  var = (((x_NxT - mean) * mask_NxT) ** 2).sum() / count
  return (x_NxT - mean) * jax.lax.rsqrt(var + eps) * mask_NxT


def reinforce_pp_advantages(r_NxT, mask_NxT, gamma: float = 1.0):
  """REINFORCE++ (Hu 2025): reward-to-go of the KL-shaped token rewards, batch-normalised."""
  return masked_whiten(reward_to_go(r_NxT, mask_NxT, gamma), mask_NxT)


def gae(r_NxT, values_NxT, mask_NxT, *, gamma: float = 1.0, lam: float = 0.95):
  """Generalised advantage estimation (Schulman et al. 2016) as a reverse `lax.scan`.

  Over the response tokens (mask 1) only: delta_t = r_t + gamma V_next - V_t
  and A_t = delta_t + gamma lambda A_next, where "next" is the next token
  with mask 1 (V_next = A_next = 0 past the last). Tokens with mask 0 inside
  the response (a multi-turn episode's tool responses: the environment's
  move, not the policy's) are skipped, so the value and the advantage carry
  across them. Returns R_t = A_t + V_t; both outputs are 0 where mask is 0.
  Returns (adv_NxT, returns_NxT).
  """
  mask_NxT = mask_NxT.astype(jnp.float32)
  values_NxT = values_NxT.astype(jnp.float32) * mask_NxT

  def step(carry, inputs):
    next_adv_N, next_value_N = carry
    r_N, v_N, m_N = inputs
    adv_N = r_N + gamma * next_value_N - v_N + gamma * lam * next_adv_N
    on_N = m_N > 0
    carry = (jnp.where(on_N, adv_N, next_adv_N), jnp.where(on_N, v_N, next_value_N))
    return carry, adv_N * m_N

  zeros_N = jnp.zeros(r_NxT.shape[0], jnp.float32)
  _, adv_TxN = jax.lax.scan(step, (zeros_N, zeros_N),
                            (r_NxT.astype(jnp.float32).T, values_NxT.T, mask_NxT.T),
                            reverse=True)
  adv_NxT = adv_TxN.T
  return adv_NxT, (adv_NxT + values_NxT) * mask_NxT


def overlong_penalty(lengths_N, max_len: int, buffer: int, factor: float = 1.0):
  """DAPO's soft overlong punishment: 0 up to L_max - L_cache, then linear down to -factor.

  R_len(y) = 0                              if |y| <= L_max - L_cache
           = (L_max - L_cache - |y|)/L_cache if L_max - L_cache < |y| <= L_max
           = -1                             if |y| > L_max            (times factor)
  """
  if buffer <= 0:
    return jnp.zeros(lengths_N.shape, jnp.float32)
  excess_N = lengths_N.astype(jnp.float32) - (max_len - buffer)
  return -factor * jnp.clip(excess_N / buffer, 0.0, 1.0)
