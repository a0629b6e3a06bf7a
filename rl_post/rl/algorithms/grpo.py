"""Group-normalised policy optimisation and its variants: GRPO, Dr.GRPO, DAPO, GSPO.

All four share the group-relative estimator and the clipped loss; they
differ in settings only (DAPO and GSPO are configs of the same machinery).
"""

import dataclasses

from rl_post.config_sections import check
from rl_post.rl import advantages as adv_lib
from rl_post.rl.algorithm import (AdvantageInputs, Advantages, Algorithm, PolicyLossConfig,
                                  broadcast_sequence_advantages, clipped_policy_loss,
                                  shaped_sequence_rewards)


@dataclasses.dataclass(frozen=True)
class GroupConfig(PolicyLossConfig):
  """GRPO (Shao et al. 2024) settings on top of the clipped loss.

  Attributes:
    advantage_scale: "std" divides by the group std (GRPO); "none" (Dr. GRPO).
    eps: added to the group std.
    dynamic_sampling: DAPO's filter: groups whose outcome rewards are all
      equal carry no signal and are dropped from the loss (the trainer's
      `filtering` section refills the batch with informative groups).
    overlong_buffer: L_cache of DAPO's soft overlong punishment (0 off); the
      penalty ramps from 0 at L_max - L_cache to -overlong_penalty at L_max
      (L_max = rl.max_new_tokens).
    overlong_penalty: the penalty at L_max.
  """
  aggregation: str = "sequence_mean"
  advantage_scale: str = "std"
  eps: float = 1e-6
  dynamic_sampling: bool = False
  overlong_buffer: int = 0
  overlong_penalty: float = 1.0

  def __post_init__(self):
    super().__post_init__()
    check(self.advantage_scale in adv_lib.SCALES, "advantage_scale",
          f"must be one of {adv_lib.SCALES}", self.advantage_scale)
    check(self.eps > 0, "eps", "must be > 0", self.eps)
    check(self.overlong_buffer >= 0, "overlong_buffer", "must be >= 0", self.overlong_buffer)
    check(self.overlong_penalty >= 0, "overlong_penalty", "must be >= 0",
          self.overlong_penalty)


@dataclasses.dataclass(frozen=True)
class DrGRPOConfig(GroupConfig):
  """Dr. GRPO (Liu et al. 2025): no std scaling, constant length normaliser."""
  advantage_scale: str = "none"
  aggregation: str = "sequence_sum_norm"


@dataclasses.dataclass(frozen=True)
class DAPOConfig(GroupConfig):
  """DAPO (Yu et al. 2025): clip-higher, token-level loss, dynamic sampling, overlong shaping."""
  clip_high: float = 0.28
  aggregation: str = "token_mean"
  dynamic_sampling: bool = True
  overlong_buffer: int = 16


@dataclasses.dataclass(frozen=True)
class GSPOConfig(GroupConfig):
  """GSPO (Zheng et al. 2025): sequence-level ratio with its (small) clip range."""
  ratio_level: str = "sequence"
  clip_low: float = 3e-4
  clip_high: float = 4e-4


def group_estimator(config: GroupConfig, inputs: AdvantageInputs) -> Advantages:
  rewards_N = shaped_sequence_rewards(config, inputs)
  if config.overlong_buffer:
    lengths_N = inputs.mask_NxT.sum(axis=1)
    rewards_N = rewards_N + adv_lib.overlong_penalty(
        lengths_N, inputs.max_new_tokens, config.overlong_buffer, config.overlong_penalty)
  adv_N = adv_lib.group_advantages(rewards_N, inputs.group_size, scale=config.advantage_scale,
                                   eps=config.eps)
  # DAPO filters on the outcome (accuracy), before length shaping adds variance.
  keep_N = (adv_lib.zero_variance_groups(inputs.rewards_N, inputs.group_size)
            if config.dynamic_sampling else None)
  return broadcast_sequence_advantages(adv_N, inputs.mask_NxT, keep_N)


def _entry(name, config_cls, description):
  return Algorithm(name=name, config_cls=config_cls, advantages=group_estimator,
                   loss=clipped_policy_loss, description=description, min_group_size=2)


GRPO = _entry("grpo", GroupConfig, "group-normalised advantages (Shao et al. 2024)")
DR_GRPO = _entry("dr_grpo", DrGRPOConfig, "GRPO without std or length bias (Liu et al. 2025)")
DAPO = _entry("dapo", DAPOConfig, "clip-higher, token-level loss, dynamic sampling, "
              "overlong shaping (Yu et al. 2025)")
GSPO = _entry("gspo", GSPOConfig, "sequence-level importance ratio (Zheng et al. 2025)")
