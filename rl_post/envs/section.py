"""The `episodes` config section: its dataclass, loading, and what it fixes for a run.

  section = load(config.episodes)        # EpisodesConfig, or None when absent / disabled
  tokenizer_for(section)                 # the call-vocabulary tokenizer, or None
  encode_prompt, encode_observation = encoders(section, tokenizer)

Shared by everything that runs or imitates a run's episodes: the trainer's
rounds (`rl_post.envs.trainer_rounds`), the held-out set
(`rl_post.envs.heldout`), the SFT cold start (`rl_post.sft.episodes`) and
checkpoint evaluation (`rl_post.evaluate.episodes`). Each entry point (the
RL components, the SFT trainer, the cold-start collector, checkpoint
evaluation) calls `load` once and passes the `EpisodesConfig` (or None) down;
nothing below it reads the raw section.
"""

import dataclasses
from typing import Optional

from rl_post.config_sections import check, from_section
from rl_post.envs import chat, protocol
from rl_post.envs import domains as domains_lib
from rl_post.envs import tools as tools_lib
from rl_post.envs.call_vocab import BUILTIN_TOOLS, CallVocabTokenizer, calls_for
from rl_post.envs.episodes import EpisodeConfig
from rl_post.envs.tools import ToolLimits
from rl_post.errors import ConfigError
from rl_post.sandbox import SandboxConfig

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
    heldout_size: held-out tasks for the trainer's periodic evaluation (0:
      none), drawn apart from training and the cold start
      (`rl_post.envs.heldout`).
    heldout_difficulties: their levels (() = `difficulties`); levels not in
      `difficulties` are ones training never draws.
    heldout_ks: the k of each sampled pass@k: max(heldout_ks) episodes per
      held-out task at the training temperature, besides the greedy one
      (() = greedy only).
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
  heldout_size: int = 0
  heldout_difficulties: tuple = ()
  heldout_ks: tuple = (1, 4)

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
    check(isinstance(self.heldout_size, int) and not isinstance(self.heldout_size, bool)
          and self.heldout_size >= 0, "heldout_size", "must be an int >= 0",
          self.heldout_size)
    for name in ("heldout_difficulties", "heldout_ks"):
      value = getattr(self, name)
      check(all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in value),
            name, "must be ints >= 1", value)
      object.__setattr__(self, name, tuple(value))
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


def tokenizer_for(section: Optional[EpisodesConfig]) -> Optional[CallVocabTokenizer]:
  """The tokenizer the run must use instead of `tokenizer.path` (None: that one), for
  the run's parsed episodes section (`load`; None: single-turn rounds)."""
  if section is None or section.tokenizer != "call_vocab":
    return None
  if not section.tools:
    return CallVocabTokenizer(copies=section.call_vocab_copies)
  return CallVocabTokenizer(calls=calls_for(BUILTIN_TOOLS + section.extra_tools()),
                            copies=section.call_vocab_copies)


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
