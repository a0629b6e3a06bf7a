"""RL maths as small pure functions over jnp arrays (shapes in names).

N = number of sequences (B prompts x G generations), T = sequence length.
Token arrays are aligned with the token sequence: entry t refers to token t.
"""

import jax
import jax.numpy as jnp

SCALES = ("std", "none")
KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token_mean", "sequence_mean", "sequence_sum_norm")


def group_advantages(rewards_N, group_size: int, *, scale: str = "std", eps: float = 1e-6):
  """GRPO group-relative advantages.

  Rows [g*G, (g+1)*G) form one group (the G generations of one prompt).
  A_i = (r_i - mean(r_group)) / (std(r_group) + eps) with the population
  std (ddof=0); scale="none" drops the division (Dr. GRPO).

  Returns:
    adv_N, float32.
  """
  if scale not in SCALES:
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
  if group_size < 1 or rewards_N.shape[0] % group_size:
    raise ValueError(f"{rewards_N.shape[0]} rewards do not split into groups of {group_size}")
  r_MxG = rewards_N.astype(jnp.float32).reshape(-1, group_size)
  adv_MxG = r_MxG - r_MxG.mean(axis=1, keepdims=True)
  if scale == "std":
    adv_MxG = adv_MxG / (r_MxG.std(axis=1, keepdims=True) + eps)
  return adv_MxG.reshape(-1)


def kl_penalty(logp_NxT, ref_logp_NxT, estimator: str = "k3"):
  """Per-token estimate of KL(pi || pi_ref) from samples of pi.

  k1 = log r', k2 = (log r')^2 / 2, k3 = exp(-log r') + log r' - 1 where
  log r' = logp - ref_logp (Schulman's estimators; k3 is unbiased and >= 0).
  """
  if estimator not in KL_ESTIMATORS:
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
  log_ratio = logp_NxT - ref_logp_NxT
  if estimator == "k1":
    return log_ratio
  if estimator == "k2":
    return 0.5 * log_ratio ** 2
  return jnp.exp(-log_ratio) + log_ratio - 1.0


def aggregate(per_token_NxT, mask_NxT, aggregation: str = "token_mean"):
  """Reduces per-token losses to a scalar.

  token_mean:        sum over all response tokens / number of them (DAPO).
  sequence_mean:     mean over sequences of each sequence's token mean (GRPO).
  sequence_sum_norm: sum over all tokens / (N * T), a constant normaliser
                     with no length bias (Dr. GRPO).
  """
  if aggregation not in AGGREGATIONS:
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
  mask_NxT = mask_NxT.astype(per_token_NxT.dtype)
  masked = per_token_NxT * mask_NxT
  if aggregation == "token_mean":
    return masked.sum() / jnp.maximum(mask_NxT.sum(), 1.0)
  if aggregation == "sequence_mean":
    per_seq_N = masked.sum(axis=1) / jnp.maximum(mask_NxT.sum(axis=1), 1.0)
    return per_seq_N.mean()
  return masked.sum() / per_token_NxT.size


def policy_loss(logp_NxT, old_logp_NxT, adv_N_or_NxT, mask_NxT, *, ref_logp_NxT=None,
                clip_low: float = 0.2, clip_high: float = 0.2, kl_coef: float = 0.0,
                kl_estimator: str = "k3", aggregation: str = "token_mean"):
  """Clipped surrogate policy loss with an optional KL penalty.

  L_t = max(-A r_t, -A clip(r_t, 1 - eps_low, 1 + eps_high)) + beta KL_t
  with r_t = exp(logp_t - old_logp_t), aggregated over masked tokens.

  Args:
    logp_NxT: log pi_theta of the sampled tokens (differentiated).
    old_logp_NxT: behaviour log-probs recorded at sampling time.
    adv_N_or_NxT: per-sequence or per-token advantages.
    mask_NxT: 1 on tokens that are trained (the response), 0 elsewhere.
    ref_logp_NxT: frozen reference log-probs; required when kl_coef > 0.
  Returns:
    (loss, metrics dict of scalars).
  """
  if kl_coef > 0 and ref_logp_NxT is None:
    raise ValueError("kl_coef > 0 needs ref_logp_NxT")
  adv_NxT = adv_N_or_NxT[:, None] if adv_N_or_NxT.ndim == 1 else adv_N_or_NxT
  mask_NxT = mask_NxT.astype(jnp.float32)
  log_ratio_NxT = logp_NxT - old_logp_NxT
  ratio_NxT = jnp.exp(log_ratio_NxT)
  unclipped = -adv_NxT * ratio_NxT
  clipped = -adv_NxT * jnp.clip(ratio_NxT, 1.0 - clip_low, 1.0 + clip_high)
  pg_NxT = jnp.maximum(unclipped, clipped)
  per_token_NxT = pg_NxT
  metrics = {}
  if ref_logp_NxT is not None:
    kl_NxT = kl_penalty(logp_NxT, ref_logp_NxT, kl_estimator)
    metrics["kl"] = aggregate(kl_NxT, mask_NxT, "token_mean")
    if kl_coef > 0:
      per_token_NxT = per_token_NxT + kl_coef * kl_NxT
  loss = aggregate(per_token_NxT, mask_NxT, aggregation)
  token_mean = lambda x: aggregate(x, mask_NxT, "token_mean")
  metrics.update({
      "pg_loss": aggregate(pg_NxT, mask_NxT, aggregation),
      "clip_frac": token_mean((clipped > unclipped).astype(jnp.float32)),
      "ratio_mean": token_mean(ratio_NxT),
      "approx_kl_old": token_mean(0.5 * log_ratio_NxT ** 2),
  })
  return loss, jax.tree.map(jax.lax.stop_gradient, metrics)
