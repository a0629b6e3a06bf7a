"""Reward = weighted sum of per-domain verifier components.

Components: `outcome` (the task was completed) and `format` (the response
follows <think>...</think><answer>...</answer>). Later components (process,
efficiency) are added here, each a column of the same table.
"""

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from rl_post.config_sections import check
from rl_post.tasks import registry
from rl_post.tasks.base import Task, Verdict

COMPONENTS = ("outcome", "format")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  """Weights of the reward components and the verifier time limit."""
  outcome_weight: float = 1.0
  format_weight: float = 0.1
  timeout_s: float = 10.0
  num_workers: int = 1

  def __post_init__(self):
    check(self.timeout_s > 0, "timeout_s", "must be > 0", self.timeout_s)
    check(self.num_workers >= 0, "num_workers", "must be >= 0 (0 = in-process)",
          self.num_workers)


@dataclasses.dataclass
class RewardBatch:
  """Rewards for N completions, with their components and verdicts."""
  rewards_N: np.ndarray
  components: dict[str, np.ndarray]
  verdicts: list[Verdict]
  errors: int = 0  # completions whose verification failed (timeout, crash)


def verify_all(tasks: Sequence[Task], completions: Sequence[str],
               domain_options: Mapping[str, Mapping] | None = None) -> list[Verdict]:
  """Runs each task's domain verifier; a crashing verifier is a failed verdict."""
  domains, verdicts = {}, []
  for task, completion in zip(tasks, completions, strict=True):
    if task.domain not in domains:
      domains[task.domain] = registry.make_domain(task.domain,
                                                  (domain_options or {}).get(task.domain))
    try:
      verdicts.append(domains[task.domain].verify(task, completion))
    except Exception as e:  # a verifier bug must not kill training; it is counted
      verdicts.append(Verdict(False, False, None, f"verifier error: {type(e).__name__}: {e}"))
  return verdicts


def combine(verdicts: Sequence[Verdict], config: RewardConfig) -> RewardBatch:
  outcome = np.array([v.correct for v in verdicts], np.float32)
  fmt = np.array([v.format_ok for v in verdicts], np.float32)
  rewards = config.outcome_weight * outcome + config.format_weight * fmt
  errors = sum(v.error is not None and v.error.startswith(("verifier error", "timeout"))
               for v in verdicts)
  return RewardBatch(rewards_N=rewards, components={"outcome": outcome, "format": fmt},
                     verdicts=list(verdicts), errors=errors)
