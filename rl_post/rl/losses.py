"""Policy and value losses as small pure functions over jnp arrays.

N = sequences, T = sequence length; token arrays are aligned with the token
sequence (entry t is about token t). Every reduction goes through
`aggregate` with `Totals` of the whole (mini)batch, so the loss of a batch
equals the sum of the losses of its micro-batches (gradient accumulation is
exact).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token_mean", "sequence_mean", "sequence_sum_norm")
RATIO_LEVELS = ("token", "sequence")


class Totals(NamedTuple):
  """Normalisers of the whole batch: trained tokens and sequences with any."""
  tokens: jax.Array
  sequences: jax.Array


def totals_of(mask_NxT) -> Totals:
  mask_NxT = mask_NxT.astype(jnp.float32)
  return Totals(tokens=jnp.maximum(mask_NxT.sum(), 1.0),
                sequences=jnp.maximum((mask_NxT.sum(axis=1) > 0).sum().astype(jnp.float32), 1.0))


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


def aggregate(per_token_NxT, mask_NxT, aggregation: str = "token_mean", totals=None):
  """Reduces per-token losses to a scalar.

  token_mean:        sum over all trained tokens / number of them (DAPO).
  sequence_mean:     mean over sequences of each sequence's token mean (GRPO).
  sequence_sum_norm: sum over all tokens / (N * T), a constant normaliser
                     with no length bias (Dr. GRPO).
  `totals` (default: from `mask_NxT`) are the whole batch's counts when
  `per_token_NxT` is one micro-batch of it.
  """
  if aggregation not in AGGREGATIONS:
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
  totals = totals_of(mask_NxT) if totals is None else totals
  mask_NxT = mask_NxT.astype(per_token_NxT.dtype)
  masked = per_token_NxT * mask_NxT
  if aggregation == "token_mean":
    return masked.sum() / totals.tokens
  if aggregation == "sequence_mean":
    per_seq_N = masked.sum(axis=1) / jnp.maximum(mask_NxT.sum(axis=1), 1.0)
    return per_seq_N.sum() / totals.sequences
  return masked.sum() / (totals.sequences * per_token_NxT.shape[1])


def _as_NxT(x_N_or_NxT):
  return x_N_or_NxT[:, None] if x_N_or_NxT.ndim == 1 else x_N_or_NxT


def importance_log_ratio(logp_NxT, old_logp_NxT, mask_NxT, level: str = "token"):
  """log r: per token, or GSPO's length-normalised sequence ratio broadcast to tokens.

  GSPO: log s_i = (1/|y_i|) sum_t (logp_t - old_logp_t).
  """
  if level not in RATIO_LEVELS:
    raise ValueError(f"ratio_level must be one of {RATIO_LEVELS}, got {level!r}")
  log_ratio_NxT = (logp_NxT - old_logp_NxT) * mask_NxT
  if level == "token":
    return log_ratio_NxT
  seq_N = log_ratio_NxT.sum(axis=1) / jnp.maximum(mask_NxT.sum(axis=1), 1.0)
  return jnp.broadcast_to(seq_N[:, None], logp_NxT.shape)


def clipped_surrogate(ratio_NxT, adv_NxT, clip_low: float, clip_high: float,
                      dual_clip: float = 0.0):
  """Per-token PPO loss max(-A r, -A clip(r, 1-eps_low, 1+eps_high)).

  With dual_clip = c > 1, tokens with A < 0 are further capped at -A c
  (Ye et al. 2020), bounding the loss of very large ratios.
  Returns (loss_NxT, clipped_NxT bool).
  """
  unclipped = -adv_NxT * ratio_NxT
  clipped = -adv_NxT * jnp.clip(ratio_NxT, 1.0 - clip_low, 1.0 + clip_high)
  loss_NxT = jnp.maximum(unclipped, clipped)
  was_clipped = clipped > unclipped
  if dual_clip > 0:
    capped = jnp.minimum(loss_NxT, -adv_NxT * dual_clip)
    was_clipped = was_clipped | ((adv_NxT < 0) & (capped < loss_NxT))
    loss_NxT = jnp.where(adv_NxT < 0, capped, loss_NxT)
  return loss_NxT, was_clipped


def policy_loss(logp_NxT, old_logp_NxT, adv_N_or_NxT, mask_NxT, *, ref_logp_NxT=None,
                entropy_NxT=None, clip_low: float = 0.2, clip_high: float = 0.2,
                dual_clip: float = 0.0, ratio_level: str = "token", kl_coef: float = 0.0,
                kl_estimator: str = "k3", entropy_coef: float = 0.0,
                aggregation: str = "token_mean", totals=None, is_weight_NxT=None):
  """Clipped surrogate + beta KL - entropy bonus, aggregated over trained tokens.

  Args:
    logp_NxT: log pi_theta of the sampled tokens (differentiated).
    old_logp_NxT: behaviour log-probs recorded at sampling time.
    adv_N_or_NxT: per-sequence or per-token advantages.
    mask_NxT: 1 on trained tokens (the response), 0 elsewhere.
    ref_logp_NxT: frozen reference log-probs; required when kl_coef > 0.
    entropy_NxT: per-token entropy (differentiated); required when
      entropy_coef > 0.
    totals: `Totals` of the whole batch (default: of this one).
    is_weight_NxT: optional importance weight of each token's clipped
      surrogate against the behaviour policy (`rl_post.rl.off_policy`: TIS,
      MIS); a constant of the update. None: no weight.
  Returns:
    (loss, metrics dict of scalars, each aggregated with `totals`).
  """
  if kl_coef > 0 and ref_logp_NxT is None:
    raise ValueError("kl_coef > 0 needs ref_logp_NxT")
  if entropy_coef > 0 and entropy_NxT is None:
    raise ValueError("entropy_coef > 0 needs entropy_NxT")
  mask_NxT = mask_NxT.astype(jnp.float32)
  totals = totals_of(mask_NxT) if totals is None else totals
  adv_NxT = _as_NxT(adv_N_or_NxT).astype(jnp.float32)
  log_ratio_NxT = importance_log_ratio(logp_NxT, old_logp_NxT, mask_NxT, ratio_level)
  ratio_NxT = jnp.exp(log_ratio_NxT)
  pg_NxT, clipped_NxT = clipped_surrogate(ratio_NxT, adv_NxT, clip_low, clip_high, dual_clip)
  if is_weight_NxT is not None:
    pg_NxT = pg_NxT * jax.lax.stop_gradient(is_weight_NxT.astype(jnp.float32))
  agg = lambda x: aggregate(x, mask_NxT, aggregation, totals)
  token_mean = lambda x: aggregate(x, mask_NxT, "token_mean", totals)
  loss = agg(pg_NxT)
  metrics = {
      "pg_loss": loss,
      "clip_frac": token_mean(clipped_NxT.astype(jnp.float32)),
      "ratio_mean": token_mean(ratio_NxT),
      "approx_kl_old": token_mean(0.5 * (logp_NxT - old_logp_NxT) ** 2),
  }
  if is_weight_NxT is not None:
    metrics["is_weight_mean"] = token_mean(is_weight_NxT.astype(jnp.float32))
  if ref_logp_NxT is not None:
    kl_NxT = kl_penalty(logp_NxT, ref_logp_NxT, kl_estimator)
    metrics["kl"] = token_mean(kl_NxT)
    if kl_coef > 0:
      loss = loss + kl_coef * agg(kl_NxT)
  if entropy_NxT is not None:
    metrics["entropy"] = token_mean(entropy_NxT)
    if entropy_coef > 0:
      loss = loss - entropy_coef * agg(entropy_NxT)
  return loss, jax.tree.map(jax.lax.stop_gradient, metrics)


def value_loss(values_NxT, old_values_NxT, returns_NxT, mask_NxT, *, value_clip: float = 0.2,
               aggregation: str = "token_mean", totals=None):
  """PPO's clipped value loss 0.5 max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2).

  value_clip = 0 disables the clipped term. Returns (loss, metrics).
  """
  mask_NxT = mask_NxT.astype(jnp.float32)
  err_NxT = (values_NxT - returns_NxT) ** 2
  if value_clip > 0:
    clipped_NxT = old_values_NxT + jnp.clip(values_NxT - old_values_NxT, -value_clip, value_clip)
    err_NxT = jnp.maximum(err_NxT, (clipped_NxT - returns_NxT) ** 2)
  loss = 0.5 * aggregate(err_NxT, mask_NxT, aggregation, totals)
  metrics = {"value_loss": loss,
             "value_mean": aggregate(values_NxT, mask_NxT, "token_mean", totals)}
  return loss, jax.tree.map(jax.lax.stop_gradient, metrics)
