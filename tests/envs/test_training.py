"""GRPO over episodes: a tiny random model learns to make tool calls that succeed."""

import jax
import numpy as np
import pytest

from rl_post import models
from rl_post.envs.call_vocab import CallVocabTokenizer
from rl_post.envs.episodes import EpisodeConfig
from rl_post.envs.training import EpisodeTrainConfig, episode_rewards, train_on_episodes
from rl_post.rl.config import RLConfig
from rl_post.sampling.sampler import SamplingConfig
from rl_post.training.optimizer import OptimizerConfig


def test_tool_call_success_rises_under_grpo(sandbox):
  tok = CallVocabTokenizer(copies=4)
  config = models.ModelConfig(vocab_size=tok.vocab_size, num_layers=2, embed_dim=32,
                              num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64)
  params = models.init_params(config, jax.random.key(0))
  _, history = train_on_episodes(
      params, model_config=config, tokenizer=tok, sandbox=sandbox,
      rl=RLConfig(num_steps=6, batch_size=2, num_generations=4),
      optimizer=OptimizerConfig(learning_rate=3e-2, schedule="constant"),
      sampling=SamplingConfig(max_new_tokens=128, stop_check_interval=8),
      config=EpisodeTrainConfig(call_success_weight=1.0,
                                episode=EpisodeConfig(max_turns=3, turn_tokens=24)))
  success = [h["tool_call_success_rate"] for h in history]
  assert all(h["guard/skipped"] == 0 and h["tool_calls"] > 0 for h in history)
  assert np.mean(success[-2:]) > np.mean(success[:2]) + 0.2, success


def test_episode_rewards_and_config_errors():
  got = episode_rewards(np.array([1.0, 0.0, 0.0], np.float32), [(2, 1), (0, 0), (4, 4)], 0.5)
  np.testing.assert_allclose(got, [1.25, 0.0, 0.5])
  with pytest.raises(ValueError, match="domains"):
    EpisodeTrainConfig(domains=("chess",))
  with pytest.raises(ValueError, match="call_success_weight"):
    EpisodeTrainConfig(call_success_weight=-1.0)
