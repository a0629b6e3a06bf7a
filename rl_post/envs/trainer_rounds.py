"""Multi-turn episodes as the RL trainer's rollout rounds (the `episodes` config section).

  c.episodes = dict(enabled=True, domains=("data_questions",), max_turns=3, turn_tokens=24,
                    call_success_weight=1.0)
  python experiments/train_rl.py --config=configs/grpo_episodes.py:tiny --workdir=/tmp/ep

With `episodes.enabled`, every rollout round of `rl_post.rl.trainer` runs
`rl.batch_size` tasks x `rl.num_generations` episodes with the episode loop
(`rl_post.envs.episodes.run_episodes`) instead of one single-turn
`generate`; the rest of the trainer is unchanged: the algorithm from the
registry (GRPO, PPO with its critic, ...), reference log-probs, dynamic
filtering, the guard, checkpoints and exact resume. The update trains on
the rollout's loss mask, so tool-response tokens (loss mask 0, no
behaviour log-prob) never carry loss, KL or value targets.

Tasks come from the multi-step domains (`rl_post.envs.domains`: a
registered name or "module:Class" each), drawn as a function of (seed,
iteration, round) so a resumed run repeats them; `episodes.tools` adds
tools (name or "module:Class") to every domain's own. The sampling key is
the trainer's. The tool sandbox is started on the first round and closed
with the trainer.

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

import jax
import numpy as np

from rl_post.config_sections import check, from_section
from rl_post.envs import chat, protocol
from rl_post.envs import domains as domains_lib
from rl_post.envs import tools as tools_lib
from rl_post.envs.call_vocab import BUILTIN_TOOLS, CallVocabTokenizer, calls_for
from rl_post.envs.episodes import EpisodeConfig, run_episodes
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.tools import ToolLimits
from rl_post.data import domain_stats
from rl_post.errors import ConfigError
from rl_post.rewards.scoring import ERROR_KINDS, RewardBatch
from rl_post.sandbox import Sandbox, SandboxConfig
from rl_post.tasks.base import Verdict

TOKENIZERS = ("", "call_vocab")
CHAT_TEMPLATE = ("auto", "on", "off")


@dataclasses.dataclass(frozen=True)
class EpisodesConfig:
  """The `episodes` section.

  Attributes:
    enabled: rollout rounds run episodes (off: the single-turn trainer).
    domains: multi-step domains to draw tasks from (uniformly): registered
      names or "module:Class" of an `EnvDomain` subclass.
    tools: tools offered in every episode besides its domain's own:
      registered names or "module:Class" of a `Tool` subclass.
    difficulties: levels drawn uniformly per task.
    max_turns: model turns per episode.
    turn_tokens: sampling budget of one turn (`rl.max_new_tokens` is the
      whole episode's: model turns plus tool responses).
    call_success_weight: weight of the call-success fraction (calls whose
      tool ran / calls, the episode-ending `submit` not counted) added to
      the verifier's reward; see the module docstring.
    tokenizer: "" = the run's tokenizer (`tokenizer.path`); "call_vocab" =
      `CallVocabTokenizer`, whose tool calls are single tokens, so a
      random-weight model calls tools (CPU runs and tests).
    call_vocab_copies: ids per tool call in the call_vocab tokenizer.
    chat_template: prompts and tool responses through the tokenizer's chat
      template: "on", "off", or "auto" (on when the tokenizer wraps prompts
      in its template, as pretrained chat models do).
    stop_check_interval: decode steps between checks for `</tool_call>`.
    limits: `ToolLimits` fields (per-call / per-episode seconds, output size).
    sandbox: `SandboxConfig` fields of the tool sandbox (strict isolation).
  """
  enabled: bool = False
  domains: tuple = ("data_questions",)
  tools: tuple = ()
  difficulties: tuple = (1,)
  max_turns: int = 4
  turn_tokens: int = 64
  call_success_weight: float = 0.0
  tokenizer: str = ""
  call_vocab_copies: int = 4
  chat_template: str = "auto"
  stop_check_interval: int = 8
  limits: dict = dataclasses.field(default_factory=dict)
  sandbox: dict = dataclasses.field(default_factory=lambda: dict(num_workers=2, timeout_s=10.0))

  def __post_init__(self):
    check(isinstance(self.enabled, bool), "enabled", "must be a bool", self.enabled)
    check(bool(self.domains) and all(isinstance(d, str) and domains_lib.is_known(d)
                                     for d in self.domains), "domains",
          f"must be non-empty names from {domains_lib.available()} or 'module:Class'",
          self.domains)
    check(all(isinstance(t, str) and tools_lib.is_known(t) for t in self.tools), "tools",
          f"must be names from {tools_lib.available()} or 'module:Class'", self.tools)
    check(bool(self.difficulties) and all(isinstance(k, int) and k >= 1
                                          for k in self.difficulties),
          "difficulties", "must be non-empty ints >= 1", self.difficulties)
    check(self.call_success_weight >= 0, "call_success_weight", "must be >= 0",
          self.call_success_weight)
    check(self.tokenizer in TOKENIZERS, "tokenizer", f"must be one of {TOKENIZERS}",
          self.tokenizer)
    check(isinstance(self.call_vocab_copies, int) and self.call_vocab_copies >= 1,
          "call_vocab_copies", "must be an int >= 1", self.call_vocab_copies)
    check(self.chat_template in CHAT_TEMPLATE, "chat_template",
          f"must be one of {CHAT_TEMPLATE}", self.chat_template)
    check(isinstance(self.stop_check_interval, int) and self.stop_check_interval >= 1,
          "stop_check_interval", "must be an int >= 1", self.stop_check_interval)
    try:
      EpisodeConfig(max_turns=self.max_turns, turn_tokens=self.turn_tokens)
    except ValueError as e:
      field = "max_turns" if "max_turns" in str(e) else "turn_tokens"
      raise ValueError(f"{field} must be an int >= 1, got {getattr(self, field)!r}") from None
    object.__setattr__(self, "domains", tuple(self.domains))
    object.__setattr__(self, "tools", tuple(self.tools))
    object.__setattr__(self, "difficulties", tuple(self.difficulties))
    object.__setattr__(self, "limits", dict(self.limits))
    object.__setattr__(self, "sandbox", dict(self.sandbox))
    # validated now, so a typo fails at start-up, not at the first round
    from_section(ToolLimits, self.limits, "episodes.limits")
    from_section(SandboxConfig, self.sandbox, "episodes.sandbox")

  def env_domains(self) -> dict:
    """spec -> EnvDomain for `domains`.

    Raises:
      ConfigError: on `episodes.domains`, for a domain that does not load.
    """
    out = {}
    for spec in self.domains:
      try:
        out[spec] = domains_lib.make_domain(spec)
        tools_lib.toolset(out[spec].env_class.tools)  # the domain's own tools load
      except ValueError as e:
        raise ConfigError("episodes.domains", spec, str(e)) from None
    names = [d.name for d in out.values()]
    if len(set(names)) != len(names):
      raise ConfigError("episodes.domains", self.domains,
                        f"name one domain twice (their names: {names})")
    return out

  def extra_tools(self) -> tuple:
    """The Tools of `tools`.

    Raises:
      ConfigError: on `episodes.tools`, for a tool that does not load.
    """
    out = []
    for spec in self.tools:
      try:
        out.append(tools_lib.make_tool(spec))
      except ValueError as e:
        raise ConfigError("episodes.tools", spec, str(e)) from None
    try:
      tools_lib.toolset(out)
    except ValueError as e:
      raise ConfigError("episodes.tools", self.tools, str(e)) from None
    return tuple(out)

  @property
  def tool_limits(self) -> ToolLimits:
    return ToolLimits(**self.limits)

  @property
  def episode(self) -> EpisodeConfig:
    return EpisodeConfig(max_turns=self.max_turns, turn_tokens=self.turn_tokens)


def load(section) -> Optional[EpisodesConfig]:
  """The validated section, or None when absent or not enabled (single-turn rounds).

  Raises:
    ConfigError: naming `episodes.domains` or `episodes.tools` for an entry
      that does not load (a bad "module:Class", a class of the wrong kind).
  """
  config = from_section(EpisodesConfig, section, "episodes")
  if not config.enabled:
    return None
  extra = config.extra_tools()  # loaded now, so a bad name fails at start-up
  for spec, domain in config.env_domains().items():
    try:
      tools_lib.toolset(tuple(domain.env_class.tools) + extra)
    except ValueError as e:
      raise ConfigError("episodes.tools", config.tools, f"with domain {spec!r}: {e}") from None
  return config


def tokenizer_for(config) -> Optional[CallVocabTokenizer]:
  """The tokenizer the run must use instead of `tokenizer.path` (None: that one)."""
  section = load(config.get("episodes"))
  if section is None or section.tokenizer != "call_vocab":
    return None
  if not section.tools:
    return CallVocabTokenizer(copies=section.call_vocab_copies)
  return CallVocabTokenizer(calls=calls_for(BUILTIN_TOOLS + section.extra_tools()),
                            copies=section.call_vocab_copies)


def from_config(config, rl, tokenizer, sampling) -> Optional["EpisodeRounds"]:
  """The run's episode rounds, or None when `config.episodes` is absent or disabled."""
  section = load(config.get("episodes"))
  if section is None:
    return None
  if rl.async_rewards:
    raise ValueError("episodes.enabled needs rl.async_rewards=False: an episode round scores "
                     "its episodes itself (the verifier runs at each episode's end)")
  if section.turn_tokens > rl.max_new_tokens:
    raise ConfigError("episodes.turn_tokens", section.turn_tokens, f"must be <= "
                      f"rl.max_new_tokens ({rl.max_new_tokens}), the whole episode's budget")
  return EpisodeRounds(section, seed=int(config.seed), tokenizer=tokenizer, sampling=sampling)


def encoders(config: EpisodesConfig, tokenizer):
  """(encode_prompt, encode_observation) of the run's episodes: through the chat template
  (`chat.chat_encoders`) when `chat_template` is "on", or "auto" and the tokenizer wraps
  prompts in its template; else the plain prompt text and the tool response as text
  (special tokens off, `protocol.text_encoder`). The oracle episodes of an SFT cold start
  are rendered with the same two (`rl_post.sft.episodes`)."""
  use_chat = config.chat_template == "on" or (
      config.chat_template == "auto" and getattr(tokenizer, "chat_prompts", False))
  if use_chat:
    return chat.chat_encoders(tokenizer)
  return tokenizer.encode, protocol.text_encoder(tokenizer)


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
               domains: Optional[dict] = None):
  """`batch_size` tasks, a function of (seed, iteration, round) only.

  domains: spec -> EnvDomain (`config.env_domains()`, loaded when None).
  """
  domains = config.env_domains() if domains is None else domains
  rng = np.random.default_rng([seed, it, rnd])
  tasks = []
  for _ in range(batch_size):
    spec = config.domains[int(rng.integers(len(config.domains)))]
    level = config.difficulties[int(rng.integers(len(config.difficulties)))]
    task = domains[spec].generate(rng, level)
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
                                             extra_tools=self.extra_tools) for t in tasks]

  def launch(self, c, params, ref_params, timer, it: int, rnd: int) -> dict:
    """One round: B tasks x G episodes, scored; the same dict as the trainer's
    `_launch_round` (its rewards already done; reference log-probs dispatched)."""
    rl = c.rl
    if rnd == 0:  # a step's first round (also after a guard rollback)
      self._metrics = EpisodeMetrics()
    key = jax.random.fold_in(c.ctx.key("rollout"), it)
    if rnd:
      key = jax.random.fold_in(key, rnd)
    with timer("rollout"):
      tasks = draw_tasks(self.config, self.seed, it, rnd, rl.batch_size, self.domains)
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
