"""Multi-turn episodes as the RL trainer's rollout rounds (the `episodes` config section).

  c.episodes = dict(enabled=True, domains=("data_questions",), max_turns=3, turn_tokens=24,
                    call_success_weight=1.0)
  python experiments/train_rl.py --config=configs/grpo_episodes.py:tiny --workdir=/tmp/ep

With `episodes.enabled`, the RL trainer's rollout source is
`rl_post.rl.episode_source`, over these rounds: every rollout round runs
`rl.batch_size` tasks x `rl.num_generations` episodes with the episode loop
(`rl_post.envs.episodes.run_episodes`) instead of one single-turn
`generate`; the rest of the trainer is unchanged: the algorithm from the
registry (GRPO, PPO with its critic, ...), reference log-probs, dynamic
filtering, the guard, checkpoints and exact resume. The update trains on
the rollout's loss mask, so tool-response tokens (loss mask 0, no
behaviour log-prob) never carry loss, KL or value targets.

Tasks come from the multi-step domains (`rl_post.envs.domains`: a
registered name or "module:Class" each), drawn as a function of (seed,
iteration, round) so a resumed run repeats them, never one of the held-out
set of `episodes.heldout_size` (`rl_post.envs.heldout`), which the
trainer's evaluation runs (`rl_post.eval.episodes`); `episodes.tools` adds
tools (name or "module:Class") to every domain's own. The sampling key is
the trainer's. The tool sandbox (one per process: each runs its own rows'
tools, `rl_post.envs.process_rows`) is started on the first round and
closed with the trainer.

The episode reward is the verifier's score on the end state plus
`call_success_weight` x the call-success fraction, a shaping term that
never ranks giving up above trying:
  - the call that ends the episode (`submit`) is not a call here, so an
    episode whose only call is `submit`, or that makes none, gets no shaping;
  - a call succeeds when its tool ran: no error, or the program's own
    failure (a test run whose tests fail, a timeout, output cut to size);
    a call that does not parse, names no offered tool, has bad arguments,
    finds the tool budget spent or that the sandbox rejects or fails does
    not (`rl_post.envs.base`);
  - fraction = successful calls / calls, both without the ending call.
So any episode that runs a tool before it submits earns at least as much
shaping as one that submits at once, and strictly more once a tool ran.
An episode whose verification run failed in the sandbox scores 0 in all
(no shaping) and counts as a "verifier_error", like a single-turn reward
whose verification failed.
"""

import concurrent.futures
import dataclasses
from typing import Optional

import numpy as np

from rl_post.config_sections import from_section
from rl_post.envs import heldout
from rl_post.envs.domains.base import task_key
from rl_post.envs.episodes import run_episodes
from rl_post.envs.metrics import EpisodeMetrics
# the `episodes` section (rl_post/envs/section.py), also reached from here
from rl_post.envs.section import EpisodesConfig, encoders, load, tokenizer_for  # noqa: F401
from rl_post.data import domain_stats
from rl_post.errors import ConfigError
from rl_post.rewards.scoring import ERROR_KINDS, RewardBatch
from rl_post.sandbox import Sandbox, SandboxConfig
from rl_post.tasks.base import Verdict


# measured by experiments/benchmarks/episodes.py (results/episodes.json; docs/envs.md)
ASYNC_REWARDS_REFUSED = (
    "overlaps a round's scoring with the next round's generation, but an episode round's "
    "scoring is its final verification (tool calls run between its turns): 0.15 s of a "
    "45.2 s batch of model episodes (0.3%) in experiments/benchmarks/episodes.py, so there "
    "is nothing to overlap: set it to False with episodes.enabled (docs/envs.md)")


def rounds_for(section: Optional[EpisodesConfig], *, tasks_heldout_size: int, seed: int, rl,
               tokenizer, sampling) -> Optional["EpisodeRounds"]:
  """The run's episode rounds for its parsed `episodes` section (`load`), or None when
  that is absent or disabled (None).

  Args:
    tasks_heldout_size: the parsed `tasks.heldout_size` (the single-turn held-out set).
    seed: the run's seed; rl: its `RLConfig`.
  Raises:
    ConfigError: a single-turn held-out set (`tasks.heldout_size` > 0) beside
      episodes: an episodes run evaluates `episodes.heldout_size` episode tasks;
      `rl.async_rewards` (`ASYNC_REWARDS_REFUSED`); `rl.overlap_update`.
  """
  if section is None:
    return None
  if tasks_heldout_size:
    raise ConfigError("tasks.heldout_size", tasks_heldout_size, "is the single-turn held-out "
                      "set; an episodes run evaluates held-out episode tasks: set it to 0 and "
                      "use episodes.heldout_size")
  if rl.async_rewards:
    raise ConfigError("rl.async_rewards", True, ASYNC_REWARDS_REFUSED)
  if rl.overlap_update:
    raise ConfigError("rl.overlap_update", True, "episodes need rl.overlap_update=False: "
                      "overlapped rollouts run single-turn rounds (an episode round drives its "
                      "tool sandbox and verifier inside the launch)")
  if section.turn_tokens > rl.max_new_tokens:
    raise ConfigError("episodes.turn_tokens", section.turn_tokens, f"must be <= "
                      f"rl.max_new_tokens ({rl.max_new_tokens}), the whole episode's budget")
  return EpisodeRounds(section, seed=int(seed), tokenizer=tokenizer, sampling=sampling)


def episode_rewards(verifier_B, calls_B, successes_B, weight: float) -> np.ndarray:
  """verifier + weight * (successful calls / calls) per episode (0 shaping without calls).

  calls_B, successes_B: `Env.tool_calls` and `Env.call_successes` (the
  ending `submit` not counted; a call succeeds when its tool ran).
  """
  calls = np.asarray(calls_B, np.float32)
  ok = np.asarray(successes_B, np.float32)
  return (np.asarray(verifier_B, np.float32)
          + weight * np.where(calls > 0, ok / np.maximum(calls, 1), 0.0)).astype(np.float32)


def reward_batch(verifier_N, calls_N, successes_N, weight: float,
                 verify_errors_N=None) -> RewardBatch:
  """The trainer's RewardBatch of N episodes.

  Components: "outcome" (the verifier), "call_success" (fraction of
  successful calls) and "format" (1 when the episode made calls and all of
  them succeeded), so the trainer's per-domain metrics apply unchanged.
  verify_errors_N: per episode, whether its verification run failed in the
  sandbox (`Env.verify_error`): such an episode scores 0, shaping and every
  component included, with error kind "verifier_error" (as `scoring.combine`
  treats a single-turn completion whose verification failed).
  """
  verifier_N = np.asarray(verifier_N, np.float32)
  calls_N, successes_N = np.asarray(calls_N), np.asarray(successes_N)
  ok_N = (np.ones(len(verifier_N), bool) if verify_errors_N is None
          else ~np.asarray(verify_errors_N, bool))
  if ok_N.shape != verifier_N.shape:
    raise ValueError(f"{len(verifier_N)} episodes but {ok_N.shape[0]} verify errors")
  verifier_N = np.where(ok_N, verifier_N, 0.0).astype(np.float32)
  success_N = np.where(ok_N & (calls_N > 0), successes_N / np.maximum(calls_N, 1), 0.0)
  format_N = ok_N & (calls_N > 0) & (successes_N == calls_N)
  verdicts = [Verdict(float(v), bool(f)) for v, f in zip(verifier_N, format_N)]
  error_kinds = [None if ok else "verifier_error" for ok in ok_N]
  return RewardBatch(
      rewards_N=np.where(ok_N, episode_rewards(verifier_N, calls_N, successes_N, weight),
                         0.0).astype(np.float32),
      correct_N=np.array([v.correct for v in verdicts], bool),
      components={"outcome": verifier_N, "call_success": success_N.astype(np.float32),
                  "format": format_N.astype(np.float32)},
      verdicts=verdicts, error_kinds=error_kinds,
      error_counts={kind: error_kinds.count(kind) for kind in ERROR_KINDS})


def draw_tasks(config: EpisodesConfig, seed: int, it: int, rnd: int, batch_size: int,
               domains: Optional[dict] = None, exclude: frozenset = frozenset()):
  """`batch_size` tasks, a function of (seed, iteration, round) only.

  domains: spec -> EnvDomain (`config.env_domains()`, loaded when None).
  exclude: task keys (`task_key`) never drawn, the held-out set's: such a
    draw is redrawn at the same domain and level.
  """
  domains = config.env_domains() if domains is None else domains
  rng = np.random.default_rng([seed, it, rnd])
  tasks = []
  for _ in range(batch_size):
    spec = config.domains[int(rng.integers(len(config.domains)))]
    level = config.difficulties[int(rng.integers(len(config.difficulties)))]
    task = domains[spec].generate(rng, level)
    for _ in range(heldout.MAX_REDRAWS):
      if task_key(task) not in exclude:
        break
      task = domains[spec].generate(rng, level)
    else:
      raise ValueError(f"env domain {spec!r} level {level}: no task outside the held-out set "
                       f"in {heldout.MAX_REDRAWS} draws; lower episodes.heldout_size")
    if task.domain != domains[spec].name:  # episodes are routed to their envs by this name
      raise ValueError(f"env domain {spec!r} made a task of domain {task.domain!r}; its "
                       f"tasks must carry its name {domains[spec].name!r}")
    tasks.append(task)
  return tasks


def _done(value):
  future = concurrent.futures.Future()
  future.set_result(value)
  return future


class EpisodeRounds:
  """The trainer's rollout rounds over episodes; one per run (holds the tool sandbox)."""

  def __init__(self, config: EpisodesConfig, *, seed: int, tokenizer, sampling):
    self.config = config
    self.seed = int(seed)
    self.domains = config.env_domains()  # spec -> EnvDomain
    self._by_name = {d.name: d for d in self.domains.values()}  # task.domain -> EnvDomain
    self.extra_tools = config.extra_tools()
    self.tokenizer = tokenizer
    self.sampling = dataclasses.replace(sampling,
                                        stop_check_interval=config.stop_check_interval)
    encode_prompt, encode_observation = encoders(config, tokenizer)
    self.encoders = dict(encode_prompt=encode_prompt, encode_observation=encode_observation)
    self._sandbox = None
    self._metrics = EpisodeMetrics()
    self.heldout = heldout.heldout_tasks(config, self.seed, self.domains)
    self._heldout_keys = frozenset(task_key(t) for t in self.heldout)

  @property
  def sandbox(self) -> Sandbox:
    if self._sandbox is None:
      self._sandbox = Sandbox(from_section(SandboxConfig, self.config.sandbox,
                                           "episodes.sandbox"))
    return self._sandbox

  def close(self):
    if self._sandbox is not None:
      self._sandbox.close()
      self._sandbox = None

  def make_envs(self, tasks) -> list:
    """A fresh environment per task, from its domain, with the configured extra tools."""
    return [self._by_name[t.domain].make_env(limits=self.config.tool_limits,
                                             max_turns=self.config.max_turns,
                                             extra_tools=self.extra_tools) for t in tasks]

  def launch(self, c, params, ref_params, timer, it: int, rnd: int, key) -> dict:
    """One round: B tasks x G episodes sampled with `key`, scored; a
    `rl_post.rl.rollout_source.Round` (its rewards already done; reference
    log-probs dispatched)."""
    rl = c.rl
    if rnd == 0:  # a step's first round (also after a guard rollback)
      self._metrics = EpisodeMetrics()
    with timer("rollout"):
      tasks = draw_tasks(self.config, self.seed, it, rnd, rl.batch_size, self.domains,
                         self._heldout_keys)
      tasks_N = [t for t in tasks for _ in range(rl.num_generations)]
      envs = self.make_envs(tasks_N)
      result = run_episodes(params, envs, tasks_N, tokenizer=self.tokenizer,
                            model_config=c.model_config, sampling=self.sampling,
                            sandbox=self.sandbox, rng=key, config=self.config.episode,
                            metrics=self._metrics, **self.encoders)
    with timer("reward"):
      rewards = reward_batch(result.rewards_B, [env.tool_calls for env in envs],
                             [env.call_successes for env in envs],
                             self.config.call_success_weight,
                             [env.verify_error is not None for env in envs])
      tokens = c.shard(np.asarray(result.rollout.tokens_BxT))
      ref_logp = None if ref_params is None else c.ref_fn(
          ref_params, tokens, c.shard(np.asarray(result.rollout.loss_mask_BxT)))
    return dict(tasks_N=tasks_N, host=result.rollout, pending=_done(rewards), ref_logp=ref_logp,
                tokens=tokens)

  def heldout_records(self, params, *, model_config, rng, batch_size: int, greedy: bool,
                      samples: int = 0) -> list:
    """The held-out set's episodes (`heldout.EpisodeRecord`s): one greedy episode per
    task, or `samples` (0: max(heldout_ks)) sampled at the sampling temperature."""
    sampling = dataclasses.replace(self.sampling, greedy=greedy)
    samples = 1 if greedy else samples or max(self.config.heldout_ks)
    return heldout.run_model(params, self.heldout, samples=samples, make_envs=self.make_envs,
                             tokenizer=self.tokenizer, model_config=model_config,
                             sampling=sampling, sandbox=self.sandbox, rng=rng,
                             config=self.config.episode, batch_size=batch_size,
                             encoders=self.encoders)

  def step_metrics(self, scored: dict) -> dict:
    """Per-domain statistics of every episode of the step, and the episode metrics:
    tool-call success, calls and turns per episode, time in tools vs generation,
    episode length percentiles, calls and errors per tool and kind."""
    rewards = scored["rewards"]
    metrics = domain_stats.domain_metrics(scored["tasks_N"], rewards.verdicts,
                                          rewards.rewards_N, rewards.components,
                                          rewards.error_kinds)
    summary = self._metrics.summary()
    metrics.update({f"episodes/{k}": float(v) for k, v in summary.items()})
    busy = summary["tool_seconds"] + summary["generation_seconds"]
    metrics["episodes/tool_time_frac"] = summary["tool_seconds"] / busy if busy else 0.0
    return metrics
