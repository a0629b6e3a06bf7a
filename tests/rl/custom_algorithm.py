"""An RL algorithm defined outside the package, loaded by `rl.algorithm = "custom_algorithm:..."`
(tests/rl/test_algorithm_paths.py): best-of-group, the example of docs/algorithms.md."""

import dataclasses

from rl_post.config_sections import check
from rl_post.rl.algorithm import (AdvantageInputs, Advantages, Algorithm, PolicyLossConfig,
                                  broadcast_sequence_advantages, clipped_policy_loss,
                                  shaped_sequence_rewards)


@dataclasses.dataclass(frozen=True)
class BestOfGroupConfig(PolicyLossConfig):
  """bonus: the advantage of a rollout whose reward is its group's maximum."""
  bonus: float = 1.0

  def __post_init__(self):
    super().__post_init__()
    check(self.bonus > 0, "bonus", "must be > 0", self.bonus)


def best_of_group_estimator(config: BestOfGroupConfig, inputs: AdvantageInputs) -> Advantages:
  r_MxG = shaped_sequence_rewards(config, inputs).reshape(-1, inputs.group_size)
  best_N = (r_MxG == r_MxG.max(axis=1, keepdims=True)).reshape(-1)
  return broadcast_sequence_advantages(best_N * config.bonus, inputs.mask_NxT)


BEST_OF_GROUP = Algorithm(name="custom_best_of_group", config_cls=BestOfGroupConfig,
                          advantages=best_of_group_estimator, loss=clipped_policy_loss,
                          description="reinforce each group's best rollouts", min_group_size=2)


def make_best_of_two():
  """A callable that returns the entry (what a factory with settings would be)."""
  return dataclasses.replace(BEST_OF_GROUP, name="custom_best_of_two")


NOT_AN_ALGORITHM = 3
NAMED_LIKE_GRPO = dataclasses.replace(BEST_OF_GROUP, name="grpo")


def broken_factory():
  raise RuntimeError("no GPU here")
