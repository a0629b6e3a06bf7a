"""PPO (Schulman et al. 2017) with GAE and a learned critic (see `rl_post.rl.critic`)."""

import dataclasses

import jax.numpy as jnp

from rl_post.config_sections import check
from rl_post.rl import advantages as adv_lib
from rl_post.rl.algorithm import (AdvantageInputs, Advantages, Algorithm, PolicyLossConfig,
                                  clipped_policy_loss, shaped_token_rewards)

CRITICS = ("head", "separate")


@dataclasses.dataclass(frozen=True)
class PPOConfig(PolicyLossConfig):
  """PPO settings.

  Attributes:
    gamma, gae_lambda: GAE's discount and lambda.
    whiten_advantages: normalise advantages over the batch's response tokens.
    critic: "head" (a scalar value head on the policy trunk, trained jointly
      with weight vf_coef) | "separate" (a value model of the same
      architecture, initialised from the policy).
    vf_coef: weight of the value loss in the joint loss ("head").
    value_clip: clip range of the value loss around the sampling-time values.
    critic_learning_rate: learning rate of the critic's own optimizer
      (the rest of its settings follow the `optimizer` section).
  """
  kl_in_reward: bool = True
  kl_estimator: str = "k1"
  gamma: float = 1.0
  gae_lambda: float = 0.95
  whiten_advantages: bool = True
  critic: str = "head"
  vf_coef: float = 0.5
  value_clip: float = 0.2
  critic_learning_rate: float = 1e-4

  def __post_init__(self):
    super().__post_init__()
    check(0 < self.gamma <= 1, "gamma", "must be in (0, 1]", self.gamma)
    check(0 <= self.gae_lambda <= 1, "gae_lambda", "must be in [0, 1]", self.gae_lambda)
    check(self.critic in CRITICS, "critic", f"must be one of {CRITICS}", self.critic)
    check(self.vf_coef > 0, "vf_coef", "must be > 0", self.vf_coef)
    check(self.value_clip >= 0, "value_clip", "must be >= 0 (0 disables)", self.value_clip)
    check(self.critic_learning_rate > 0, "critic_learning_rate", "must be > 0",
          self.critic_learning_rate)


def gae_estimator(config: PPOConfig, inputs: AdvantageInputs) -> Advantages:
  if inputs.values_NxT is None:
    raise ValueError("ppo needs values_NxT from the critic")
  r_NxT = shaped_token_rewards(config, inputs)
  adv_NxT, returns_NxT = adv_lib.gae(r_NxT, inputs.values_NxT, inputs.mask_NxT,
                                     gamma=config.gamma, lam=config.gae_lambda)
  if config.whiten_advantages:
    adv_NxT = adv_lib.masked_whiten(adv_NxT, inputs.mask_NxT)
  return Advantages(adv_NxT=adv_NxT, keep_N=jnp.ones(r_NxT.shape[0], jnp.float32),
                    returns_NxT=returns_NxT)


PPO = Algorithm(name="ppo", config_cls=PPOConfig, advantages=gae_estimator,
                loss=clipped_policy_loss, description="GAE with a learned critic "
                "(Schulman et al. 2017)", uses_critic=True)
