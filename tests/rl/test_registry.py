"""The algorithm registry and the `rl` section: one seam, validated everywhere."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from configs import base, demo
from rl_post.rl import config as rl_config
from rl_post.rl import registry
from rl_post.rl.algorithm import Advantages, Algorithm, PolicyLossConfig, clipped_policy_loss
from rl_post.rl.train_step import rollout_batch

BUILT_IN = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo")


def test_every_built_in_algorithm_loads_from_the_base_section():
  assert set(BUILT_IN) <= set(registry.names())
  for name in BUILT_IN:
    section = base.get_base().rl
    section.algorithm = name
    rl = rl_config.load(section)
    assert rl.entry is registry.get(name)
    assert rl.algo == registry.get(name).config_cls()


def test_algorithm_defaults_follow_their_papers():
  load = lambda name: rl_config.load(dict(algorithm=name)).algo
  dapo, gspo, dr = load("dapo"), load("gspo"), load("dr_grpo")
  assert dapo.clip_high > dapo.clip_low and dapo.aggregation == "token_mean"
  assert dapo.dynamic_sampling and dapo.overlong_buffer > 0
  assert gspo.ratio_level == "sequence" and gspo.clip_high < 1e-3
  assert dr.advantage_scale == "none" and dr.aggregation == "sequence_sum_norm"
  assert load("reinforce_pp").kl_in_reward and load("ppo").critic == "head"


def test_bad_values_are_named_in_any_algorithm_section():
  section = base.get_base().rl
  section.ppo.critic = "shared"  # grpo is chosen, ppo's section is still checked
  with pytest.raises(ValueError, match="rl.ppo.critic must be one of"):
    rl_config.load(section)
  with pytest.raises(ValueError, match=r"rl.dapo: unknown field\(s\) \['clip_hi'\]"):
    rl_config.load(dict(dapo=dict(clip_hi=0.3)))
  with pytest.raises(ValueError, match="rl.num_generations must be >= 2 for rloo"):
    rl_config.load(dict(algorithm="rloo", num_generations=1))
  assert rl_config.load(dict(algorithm="ppo", num_generations=1)).num_generations == 1
  with pytest.raises(ValueError, match="rl.grad_accum must divide the minibatch size"):
    rl_config.load(dict(batch_size=2, num_generations=3, grad_accum=4))
  with pytest.raises(ValueError, match="rl.remat must be one of"):
    rl_config.load(dict(remat="some"))
  with pytest.raises(ValueError, match="rl.unroll_layers must be an int >= 1"):
    rl_config.load(dict(unroll_layers=0))
  with pytest.raises(ValueError, match="rl.logprob_remat must be a bool"):
    rl_config.load(dict(logprob_remat="no"))
  with pytest.raises(ValueError, match="already registered"):
    registry.register(registry.get("grpo"))


def test_demo_config_keeps_its_settings():
  rl = rl_config.load(demo.get_config().rl)
  assert (rl.algorithm, rl.batch_size, rl.num_generations, rl.max_prompt_len,
          rl.max_new_tokens, rl.num_steps, rl.checkpoint_every, rl.num_minibatches) == (
              "grpo", 8, 8, 144, 56, 80, 20, 4)
  assert (rl.algo.clip_low, rl.algo.clip_high, rl.algo.aggregation, rl.algo.kl_coef,
          rl.algo.advantage_scale) == (0.2, 0.28, "token_mean", 0.04, "std")


@dataclasses.dataclass(frozen=True)
class _BestOfGroupConfig(PolicyLossConfig):
  bonus: float = 1.0


def _best_of_group(config, inputs):
  r_MxG = inputs.rewards_N.reshape(-1, inputs.group_size)
  best_N = (r_MxG == r_MxG.max(axis=1, keepdims=True)).reshape(-1) * config.bonus
  return Advantages(adv_NxT=best_N[:, None] * inputs.mask_NxT, keep_N=jnp.ones_like(best_N))


def test_a_new_algorithm_is_one_register_call():
  registry.register(Algorithm(name="test_best_of_group", config_cls=_BestOfGroupConfig,
                              advantages=_best_of_group, loss=clipped_policy_loss,
                              description="test entry", min_group_size=2))
  section = base.get_base().rl
  section.update(algorithm="test_best_of_group", batch_size=1, num_generations=2)
  rl = rl_config.load(dict(section.to_dict(), test_best_of_group=dict(bonus=2.0)))
  assert rl.algo.bonus == 2.0 and "test_best_of_group" in rl_config.section_defaults()
  mask = np.array([[0, 1, 1], [0, 1, 0]], np.int32)
  batch = rollout_batch(rl, np.zeros((2, 3), np.int32), mask, np.zeros((2, 3), np.float32),
                        np.array([0.0, 1.0]))
  np.testing.assert_array_equal(batch["adv"], [[0, 0, 0], [0, 2, 0]])


@pytest.mark.parametrize("variant", ["", "tiny"])
def test_algorithm_ablation_configs_load(variant):
  from configs import dapo_arithmetic, ppo_arithmetic
  ppo = rl_config.load(ppo_arithmetic.get_config(variant).rl)
  assert ppo.algorithm == "ppo" and ppo.uses_critic and ppo.algo.kl_coef == 0.02
  config = dapo_arithmetic.get_config(variant)
  dapo = rl_config.load(config.rl)
  assert dapo.algorithm == "dapo" and config.filtering.enabled
  assert 0 < dapo.algo.overlong_buffer < dapo.max_new_tokens
