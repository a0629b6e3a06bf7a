"""GRPO over multi-turn episodes.

Each step samples `rl.batch_size` tasks from the multi-step domains, runs
`rl.num_generations` episodes per task (`run_episodes`), turns the episode
rewards into advantages with the configured algorithm's estimator
(`rl.algorithm`, through `rl_post.rl.train_step.rollout_batch`) and takes
its update on the rollout's `loss_mask_BxT`: the model's tokens only, never
the tool responses. Algorithms that need a reference model or a critic are
refused here (the config-driven trainer has those).

The episode reward is the verifier's, plus `call_success_weight` times the
fraction of the episode's tool calls that succeeded (0 without calls), a
shaping term that lets a model far from solving tasks first learn to call
tools well.
"""

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.envs.domains import DOMAINS, make_env
from rl_post.envs.episodes import EpisodeConfig, run_episodes
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.tools import ToolLimits
from rl_post.rl.config import RLConfig
from rl_post.rl.train_step import make_rl_train_step, rollout_batch
from rl_post.sampling.sampler import SamplingConfig
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.state import TrainState


@dataclasses.dataclass(frozen=True)
class EpisodeTrainConfig:
  domains: Sequence[str] = ("data_questions",)
  difficulty: int = 1
  call_success_weight: float = 0.0
  limits: ToolLimits = ToolLimits()
  episode: EpisodeConfig = EpisodeConfig()

  def __post_init__(self):
    unknown = [d for d in self.domains if d not in DOMAINS]
    if not self.domains or unknown:
      raise ValueError(f"domains must be non-empty names from {sorted(DOMAINS)}, got "
                       f"{list(self.domains)}")
    if self.call_success_weight < 0:
      raise ValueError(f"call_success_weight must be >= 0, got {self.call_success_weight}")


def episode_rewards(verifier_B, metrics_per_row, weight):
  """verifier + weight * (successful calls / calls) per episode."""
  calls = np.array([c for c, _ in metrics_per_row], np.float32)
  ok = np.array([s for _, s in metrics_per_row], np.float32)
  return verifier_B + weight * np.where(calls > 0, ok / np.maximum(calls, 1), 0.0)


def train_on_episodes(params, *, model_config, tokenizer, sandbox, rl: RLConfig,
                      optimizer: OptimizerConfig, sampling: SamplingConfig,
                      config: EpisodeTrainConfig = EpisodeTrainConfig(), seed: int = 0):
  """Runs rl.num_steps RL steps over episodes; returns (params, per-step metrics)."""
  if rl.needs_reference or rl.uses_critic:
    raise ValueError(f"train_on_episodes: rl.algorithm={rl.algorithm!r} needs a "
                     "reference model or a critic; set its kl_coef to 0 and use a critic-free "
                     "algorithm (grpo, dr_grpo, dapo, gspo, rloo)")
  opt = make_optimizer(optimizer)
  state = TrainState(step=jnp.int32(0), params=params, opt_state=opt.init(params),
                     rng=jax.random.key(seed))
  step_fn = jax.jit(make_rl_train_step(model_config, rl, opt))
  rng = np.random.default_rng(seed)
  group, history = rl.num_generations, []
  for it in range(rl.num_steps):
    names = [config.domains[int(rng.integers(len(config.domains)))] for _ in range(rl.batch_size)]
    tasks = [DOMAINS[n].generate(rng, config.difficulty) for n in names]
    tasks_N = [t for t in tasks for _ in range(group)]
    envs = [make_env(t.domain, limits=config.limits) for t in tasks_N]
    metrics = EpisodeMetrics()
    result = run_episodes(state.params, envs, tasks_N, tokenizer=tokenizer,
                          model_config=model_config, sampling=sampling, sandbox=sandbox,
                          seeds_B=np.arange(len(envs)) + it * len(envs) + seed * 100_003,
                          config=config.episode, metrics=metrics)
    rewards = episode_rewards(result.rewards_B, [(e.calls, e.call_successes) for e in envs],
                              config.call_success_weight)
    r = result.rollout
    batch = rollout_batch(rl, np.asarray(r.tokens_BxT), np.asarray(r.loss_mask_BxT),
                          np.asarray(r.logp_BxT), rewards)
    state, step_metrics = step_fn(state, batch)
    row = {k: float(v) for k, v in jax.device_get(step_metrics).items()}
    row.update(metrics.summary())
    row["reward_shaped_mean"] = float(rewards.mean())
    history.append(row)
  return state.params, history
