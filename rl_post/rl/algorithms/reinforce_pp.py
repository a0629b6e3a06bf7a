"""REINFORCE++ (Hu 2025): per-token KL in the reward, batch-normalised returns."""

import dataclasses

import jax.numpy as jnp

from rl_post.config_sections import check
from rl_post.rl import advantages as adv_lib
from rl_post.rl.algorithm import (AdvantageInputs, Advantages, Algorithm, PolicyLossConfig,
                                  clipped_policy_loss, shaped_token_rewards)


@dataclasses.dataclass(frozen=True)
class ReinforcePPConfig(PolicyLossConfig):
  """REINFORCE++: A_t = normalise_batch(sum_{s>=t} gamma^(s-t) (r_s - beta KL_s)).

  Attributes:
    gamma: discount of the reward-to-go.
  """
  kl_coef: float = 0.01
  kl_estimator: str = "k1"
  kl_in_reward: bool = True
  gamma: float = 1.0

  def __post_init__(self):
    super().__post_init__()
    check(0 < self.gamma <= 1, "gamma", "must be in (0, 1]", self.gamma)


def reinforce_pp_estimator(config: ReinforcePPConfig, inputs: AdvantageInputs) -> Advantages:
  r_NxT = shaped_token_rewards(config, inputs)
  adv_NxT = adv_lib.reinforce_pp_advantages(r_NxT, inputs.mask_NxT, config.gamma)
  return Advantages(adv_NxT=adv_NxT, keep_N=jnp.ones(r_NxT.shape[0], jnp.float32))


REINFORCE_PP = Algorithm(name="reinforce_pp", config_cls=ReinforcePPConfig,
                         advantages=reinforce_pp_estimator, loss=clipped_policy_loss,
                         description="per-token KL reward, batch-normalised (Hu 2025)")
