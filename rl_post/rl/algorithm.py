"""What an RL algorithm is: a config dataclass, an advantage estimator and a loss.

An `Algorithm` is a registry entry (see `rl_post.rl.registry`); the trainer
only calls `advantages(config, AdvantageInputs)` and `loss(config,
LossInputs)`, so adding an algorithm touches no trainer code. Both are pure
functions of jnp arrays.
"""

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rl_post.config_sections import check
from rl_post.rl import advantages as adv_lib
from rl_post.rl import losses


@dataclasses.dataclass(frozen=True)
class PolicyLossConfig:
  """Settings of the clipped policy loss shared by every algorithm.

  Attributes:
    clip_low, clip_high: epsilon_low / epsilon_high of the clipped ratio
      (clip-higher: clip_high > clip_low).
    dual_clip: c > 1 caps the loss of negative-advantage tokens at -A c; 0 off.
    ratio_level: "token" (PPO/GRPO) | "sequence" (GSPO's length-normalised
      sequence ratio).
    aggregation: "token_mean" | "sequence_mean" | "sequence_sum_norm".
    entropy_coef: weight of the entropy bonus (subtracted from the loss).
    kl_coef: beta, weight of KL(pi_theta || pi_ref); 0 skips the reference.
    kl_estimator: "k1" | "k2" | "k3".
    kl_in_reward: the KL penalty is subtracted from the reward (per token)
      instead of added to the loss.
  """
  clip_low: float = 0.2
  clip_high: float = 0.2
  dual_clip: float = 0.0
  ratio_level: str = "token"
  aggregation: str = "token_mean"
  entropy_coef: float = 0.0
  kl_coef: float = 0.0
  kl_estimator: str = "k3"
  kl_in_reward: bool = False

  def __post_init__(self):
    check(0 <= self.clip_low < 1, "clip_low", "must be in [0, 1)", self.clip_low)
    check(self.clip_high >= 0, "clip_high", "must be >= 0", self.clip_high)
    check(self.dual_clip == 0 or self.dual_clip > 1, "dual_clip", "must be 0 (off) or > 1",
          self.dual_clip)
    check(self.ratio_level in losses.RATIO_LEVELS, "ratio_level",
          f"must be one of {losses.RATIO_LEVELS}", self.ratio_level)
    check(self.aggregation in losses.AGGREGATIONS, "aggregation",
          f"must be one of {losses.AGGREGATIONS}", self.aggregation)
    check(self.entropy_coef >= 0, "entropy_coef", "must be >= 0", self.entropy_coef)
    check(self.kl_coef >= 0, "kl_coef", "must be >= 0", self.kl_coef)
    check(self.kl_estimator in losses.KL_ESTIMATORS, "kl_estimator",
          f"must be one of {losses.KL_ESTIMATORS}", self.kl_estimator)

  @property
  def needs_reference(self) -> bool:
    return self.kl_coef > 0


class AdvantageInputs(NamedTuple):
  """A rollout batch as the estimators see it (N = B x G rows, grouped)."""
  rewards_N: jax.Array            # outcome reward per sequence
  mask_NxT: jax.Array             # 1 on response tokens
  old_logp_NxT: jax.Array         # behaviour log-probs
  group_size: int                 # G
  max_new_tokens: int             # L_max of the response
  process_NxT: Any = None         # optional per-token (process) rewards
  ref_logp_NxT: Any = None        # reference log-probs (when kl_coef > 0)
  values_NxT: Any = None          # critic values at sampling time (PPO)


class Advantages(NamedTuple):
  adv_NxT: jax.Array                # per-token advantages
  keep_N: jax.Array                 # 0 drops a sequence from the loss
  returns_NxT: Any = None           # value targets (PPO)


class LossInputs(NamedTuple):
  logp_NxT: jax.Array
  entropy_NxT: jax.Array
  old_logp_NxT: jax.Array
  adv_NxT: jax.Array
  mask_NxT: jax.Array
  ref_logp_NxT: Any = None
  # off-policy correction (rl.tis_cap, rl.mis_*; rl_post/rl/off_policy.py): weight of
  # each token's policy-gradient term against the behaviour policy; None = none.
  # A loss that does not use `clipped_policy_loss` multiplies it in itself.
  is_weight_NxT: Any = None


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A registry entry.

  Attributes:
    name: the `rl.algorithm` value.
    config_cls: frozen dataclass of its settings (the `rl.<name>` section).
    advantages: `(config, AdvantageInputs) -> Advantages`, pure.
    loss: `(config, LossInputs, totals) -> (loss, metrics)`, pure.
    description: one line for docs and errors.
    min_group_size: smallest G its estimator accepts.
    uses_critic: the trainer keeps a critic (`rl_post.rl.critic`) for it.
  """
  name: str
  config_cls: type
  advantages: Callable[[Any, AdvantageInputs], Advantages]
  loss: Callable[[Any, LossInputs, losses.Totals], tuple[jax.Array, dict]]
  description: str
  min_group_size: int = 1
  uses_critic: bool = False


def reference_kl_NxT(config: PolicyLossConfig, inputs: AdvantageInputs):
  """Per-token KL of the behaviour policy to the reference, for KL-in-reward (else None)."""
  if not (config.kl_in_reward and config.kl_coef > 0):
    return None
  if inputs.ref_logp_NxT is None:
    raise ValueError("kl_in_reward with kl_coef > 0 needs ref_logp_NxT")
  return losses.kl_penalty(inputs.old_logp_NxT, inputs.ref_logp_NxT, config.kl_estimator)


def shaped_sequence_rewards(config: PolicyLossConfig, inputs: AdvantageInputs):
  return adv_lib.sequence_rewards(inputs.rewards_N, inputs.mask_NxT, inputs.process_NxT,
                                  reference_kl_NxT(config, inputs), config.kl_coef)


def shaped_token_rewards(config: PolicyLossConfig, inputs: AdvantageInputs):
  return adv_lib.token_rewards(inputs.rewards_N, inputs.mask_NxT, inputs.process_NxT,
                               reference_kl_NxT(config, inputs), config.kl_coef)


def broadcast_sequence_advantages(adv_N, mask_NxT, keep_N=None) -> Advantages:
  keep_N = jnp.ones_like(adv_N) if keep_N is None else keep_N
  return Advantages(adv_NxT=adv_N[:, None] * mask_NxT.astype(jnp.float32), keep_N=keep_N)


def clipped_policy_loss(config: PolicyLossConfig, inputs: LossInputs, totals=None):
  """The shared loss: clipped (token or sequence) ratio, KL in loss, entropy bonus."""
  kl_in_loss = config.kl_coef > 0 and not config.kl_in_reward
  return losses.policy_loss(
      inputs.logp_NxT, inputs.old_logp_NxT, inputs.adv_NxT, inputs.mask_NxT,
      ref_logp_NxT=inputs.ref_logp_NxT, entropy_NxT=inputs.entropy_NxT,
      clip_low=config.clip_low, clip_high=config.clip_high, dual_clip=config.dual_clip,
      ratio_level=config.ratio_level, kl_coef=config.kl_coef if kl_in_loss else 0.0,
      kl_estimator=config.kl_estimator, entropy_coef=config.entropy_coef,
      aggregation=config.aggregation, totals=totals, is_weight_NxT=inputs.is_weight_NxT)
