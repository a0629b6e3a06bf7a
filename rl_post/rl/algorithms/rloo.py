"""RLOO (Ahmadian et al. 2024): REINFORCE with a leave-one-out group baseline."""

import dataclasses

from rl_post.rl import advantages as adv_lib
from rl_post.rl.algorithm import (AdvantageInputs, Advantages, Algorithm, PolicyLossConfig,
                                  broadcast_sequence_advantages, clipped_policy_loss,
                                  shaped_sequence_rewards)


@dataclasses.dataclass(frozen=True)
class RLOOConfig(PolicyLossConfig):
  """RLOO: the sequence reward (minus beta sum_t KL_t) against the mean of the other G-1."""
  kl_in_reward: bool = True
  kl_estimator: str = "k1"


def rloo_estimator(config: RLOOConfig, inputs: AdvantageInputs) -> Advantages:
  adv_N = adv_lib.rloo_advantages(shaped_sequence_rewards(config, inputs), inputs.group_size)
  return broadcast_sequence_advantages(adv_N, inputs.mask_NxT)


RLOO = Algorithm(name="rloo", config_cls=RLOOConfig, advantages=rloo_estimator,
                 loss=clipped_policy_loss,
                 description="leave-one-out baseline (Ahmadian et al. 2024)",
                 min_group_size=2)
