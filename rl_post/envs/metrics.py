"""Episode metrics: tool-call success, calls and turns per episode, time split."""

import collections
import dataclasses

import numpy as np


@dataclasses.dataclass
class EpisodeMetrics:
  """Accumulates over a batch of episodes; `summary()` is a flat dict of floats."""
  calls: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  successes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  # kind -> episodes whose final verification run failed in the sandbox (scored 0)
  verify_errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  episode_calls: list = dataclasses.field(default_factory=list)
  episode_turns: list = dataclasses.field(default_factory=list)
  episode_tokens: list = dataclasses.field(default_factory=list)
  rewards: list = dataclasses.field(default_factory=list)
  tool_seconds: float = 0.0      # host wall time spent waiting on tool runs
  generation_seconds: float = 0.0
  verify_seconds: float = 0.0

  def record_step(self, info):
    if not info.called:
      return
    tool = info.tool or "<unparsed>"
    self.calls[tool] += 1
    if info.error_kind is None:
      self.successes[tool] += 1
    else:
      self.errors[(tool, info.error_kind)] += 1

  def record_episode(self, calls: int, turns: int, reward: float, tokens: int = 0):
    self.episode_calls.append(calls)
    self.episode_turns.append(turns)
    self.episode_tokens.append(tokens)
    self.rewards.append(reward)

  def merge(self, other: "EpisodeMetrics"):
    """Adds another batch's counts (seconds add up: per-thread time, not wall time)."""
    for name in ("calls", "successes", "errors", "verify_errors"):
      getattr(self, name).update(getattr(other, name))
    for name in ("episode_calls", "episode_turns", "episode_tokens", "rewards"):
      getattr(self, name).extend(getattr(other, name))
    for name in ("tool_seconds", "generation_seconds", "verify_seconds"):
      setattr(self, name, getattr(self, name) + getattr(other, name))

  @classmethod
  def concurrent(cls, parts: list) -> "EpisodeMetrics":
    """The metrics of batches that ran at the same time (one per process): counts
    and per-episode lists add up (in the order given), seconds are the longest part's."""
    out = cls()
    for part in parts:
      out.merge(part)
    for name in ("tool_seconds", "generation_seconds", "verify_seconds"):
      setattr(out, name, max((getattr(p, name) for p in parts), default=0.0))
    return out

  def summary(self) -> dict:
    total = sum(self.calls.values())
    out = {
        "episodes": float(len(self.rewards)),
        "reward_mean": float(np.mean(self.rewards)) if self.rewards else 0.0,
        "tool_calls": float(total),
        "tool_call_success_rate": sum(self.successes.values()) / total if total else 0.0,
        "calls_per_episode": float(np.mean(self.episode_calls)) if self.episode_calls else 0.0,
        "turns_per_episode": float(np.mean(self.episode_turns)) if self.episode_turns else 0.0,
        "tool_seconds": self.tool_seconds,
        "generation_seconds": self.generation_seconds,
        "verify_seconds": self.verify_seconds,
        "verify_errors": float(sum(self.verify_errors.values())),
    }
    if self.episode_tokens:
      for q in (50, 90, 100):
        out[f"episode_tokens_p{q}"] = float(np.percentile(self.episode_tokens, q))
    for tool, n in self.calls.items():
      out[f"calls/{tool}"] = float(n)
    for (tool, kind), n in self.errors.items():
      out[f"errors/{tool}/{kind}"] = float(n)
    for kind, n in self.verify_errors.items():
      out[f"verify_errors/{kind}"] = float(n)
    return out
