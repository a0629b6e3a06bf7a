"""Off-policy correction for rollouts the sampler drew from another policy than the trainer's.

With a low-precision sampler (`rl.rollout_precision`, rl_post/sampling/low_precision.py)
the behaviour policy mu (what sampled the tokens, whose log-probs the sampler
recorded) is not the trainer's pi_old (the f32 masters that mu was copied from).
The trainer recomputes pi_old's log-probs of the sampled tokens; the update's
ratio is pi_theta / pi_old, and each token's policy-gradient loss is weighted
by an importance weight of pi_old against mu:

  r_t = pi_old(y_t) / mu(y_t) = exp(logp_old_t - logp_behaviour_t)
  TIS (truncated importance sampling): w_t = min(r_t, C)          (rl.tis_cap = C > 0)
  MIS (masked importance sampling):    w_t = 0 where r_t outside [lo, hi]
                                       (rl.mis_low = lo, rl.mis_high = hi > 0)
Both on: w_t = min(r_t, C) * [lo <= r_t <= hi]; neither: no weight (w_t = 1).
The weight is a constant of the update (no gradient flows through it).

`gap_metrics` reports, per rollout batch, how far mu is from pi_old on its
own tokens (host numpy, `offpolicy/*` metric keys).
"""

import jax
import jax.numpy as jnp
import numpy as np


def log_ratio_NxT(old_logp_NxT, behaviour_logp_NxT, mask_NxT):
  """log r = logp_old - logp_behaviour on trained tokens, 0 elsewhere."""
  return (old_logp_NxT - behaviour_logp_NxT) * mask_NxT.astype(old_logp_NxT.dtype)


def importance_weight_NxT(old_logp_NxT, behaviour_logp_NxT, mask_NxT, *, tis_cap: float = 0.0,
                          mis_low: float = 0.0, mis_high: float = 0.0):
  """w_t (module docstring): TIS when tis_cap > 0, MIS when mis_high > 0; f32, no gradient.

  Positions off the mask get weight 1 (the loss never reads them).
  """
  log_r = log_ratio_NxT(old_logp_NxT.astype(jnp.float32),
                        behaviour_logp_NxT.astype(jnp.float32), mask_NxT)
  r_NxT = jnp.exp(log_r)
  w_NxT = jnp.minimum(r_NxT, tis_cap) if tis_cap > 0 else jnp.ones_like(r_NxT)
  if mis_high > 0:
    w_NxT = jnp.where((r_NxT >= mis_low) & (r_NxT <= mis_high), w_NxT, 0.0)
  return jax.lax.stop_gradient(w_NxT)


def gap_metrics(trainer_logp_NxT, behaviour_logp_NxT, mask_NxT, *, tis_cap: float = 0.0,
                mis_low: float = 0.0, mis_high: float = 0.0) -> dict:
  """The sampler/trainer log-prob gap on the batch's trained tokens (host numpy).

  offpolicy/logp_abs_diff_mean, _max: mean and max of |logp_old - logp_behaviour|
    per token; offpolicy/ratio_mean, _min, _max: of r = pi_old / mu;
  offpolicy/kl_k3: mean of r - log r - 1, an estimate of KL(mu || pi_old);
  offpolicy/tis_clip_frac (TIS on): fraction of tokens with r > C;
  offpolicy/mis_drop_frac (MIS on): fraction with r outside [lo, hi].
  """
  mask = np.asarray(mask_NxT) != 0
  log_r = (np.asarray(trainer_logp_NxT, np.float64)
           - np.asarray(behaviour_logp_NxT, np.float64))[mask]
  if log_r.size == 0:
    log_r = np.zeros(1)
  r = np.exp(log_r)
  out = {"offpolicy/logp_abs_diff_mean": float(np.abs(log_r).mean()),
         "offpolicy/logp_abs_diff_max": float(np.abs(log_r).max()),
         "offpolicy/ratio_mean": float(r.mean()), "offpolicy/ratio_min": float(r.min()),
         "offpolicy/ratio_max": float(r.max()),
         "offpolicy/kl_k3": float((r - log_r - 1.0).mean())}
  if tis_cap > 0:
    out["offpolicy/tis_clip_frac"] = float((r > tis_cap).mean())
  if mis_high > 0:
    out["offpolicy/mis_drop_frac"] = float(((r < mis_low) | (r > mis_high)).mean())
  return out
