"""Reward = per-domain weighted sum of named verifier components.

Components of one verdict: `outcome` (Verdict.score, partial credit in
[0, 1]), `format` (Verdict.format_ok), `process` (mean of the step scores,
unless the domain reports it itself) and every entry of
Verdict.components (e.g. `efficiency`). The weights are config data:

    rewards.weights = {"default": {"outcome": 1.0, "format": 0.1},
                       "code": {"format": 0.0, "efficiency": 0.05}}

A domain's entry overrides single keys of "default" (a config without
"default" gets outcome 1.0, format 0.1); a component without a weight
counts 0 but is still logged. A completion whose verification
failed (an error kind below) has every component 0.
"""

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from rl_post.config_sections import check
from rl_post.rewards import process_credit
from rl_post.sandbox.config import SandboxConfig
from rl_post.tasks.base import Task, Verdict

ERROR_KINDS = ("timeout", "crash", "verifier_error", "invalid_verdict")
DEFAULT_WEIGHTS = {"outcome": 1.0, "format": 0.1}
BASE_COMPONENTS = ("outcome", "format")
_RESERVED = ("mean", "std", "errors")  # metric names next to reward/<domain>/<component>


def _checked_weights(weights: Mapping[str, Any]) -> dict[str, dict[str, float]]:
  check(isinstance(weights, Mapping), "weights", "must be a mapping domain -> {component: w}",
        weights)
  out = {}
  for domain, table in weights.items():
    check(isinstance(domain, str) and isinstance(table, Mapping), f"weights.{domain}",
          "must be a mapping component -> weight", table)
    for name, w in table.items():
      field = f"weights.{domain}.{name}"
      check(isinstance(name, str) and name not in _RESERVED, field,
            f"needs a component name other than {_RESERVED}", name)
      check(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w),
            field, "must be a finite number", w)
    out[domain] = {k: float(v) for k, v in table.items()}
  out.setdefault("default", dict(DEFAULT_WEIGHTS))
  return out


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  """The `rewards` config section.

  Attributes:
    weights: component weights per domain ("default" applies to all).
    timeout_s: time budget per completion; a batch-verifying domain gets
      timeout_s x batch size for its batch. Keep it above the sandbox
      timeout so the sandbox reports slow programs first.
    num_workers: verifier worker processes (0 = verify in this process, no
      isolation: only for tests of learning and benchmarks).
    sandbox: SandboxConfig fields of the sandbox each worker creates on
      first use and hands to the domains.
    startup_timeout_s: how long a worker may take to import and start.
    batch_timeout_s: wall-clock bound on one batch, from `submit` until its
      result: completions not verified by then are `timeout` errors scored
      0 (also counted in RewardBatch.deadline_timeouts) and workers still
      inside them are replaced. Bounds a step that would otherwise wait
      timeout_s per hanging completion, one after another. 0 = no bound.
      Worker pools only (num_workers >= 1). Keep it well above a healthy
      batch's scoring time plus a worker's start-up (a replaced worker
      restarts on the next batch's clock).
  """
  weights: Mapping[str, Mapping[str, float]] = dataclasses.field(
      default_factory=lambda: {"default": dict(DEFAULT_WEIGHTS)})
  timeout_s: float = 30.0
  num_workers: int = 1
  sandbox: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  startup_timeout_s: float = 120.0
  batch_timeout_s: float = 0.0

  def __post_init__(self):
    object.__setattr__(self, "weights", _checked_weights(self.weights))
    check(self.timeout_s > 0, "timeout_s", "must be > 0", self.timeout_s)
    check(isinstance(self.num_workers, int) and self.num_workers >= 0, "num_workers",
          "must be an int >= 0 (0 = in-process)", self.num_workers)
    check(self.startup_timeout_s > 0, "startup_timeout_s", "must be > 0", self.startup_timeout_s)
    check(isinstance(self.batch_timeout_s, (int, float)) and not isinstance(
        self.batch_timeout_s, bool) and 0 <= self.batch_timeout_s < math.inf, "batch_timeout_s",
          "must be a finite number >= 0 (0 = no batch deadline)", self.batch_timeout_s)
    check(isinstance(self.sandbox, Mapping), "sandbox", "must be a mapping of SandboxConfig fields",
          self.sandbox)
    try:
      self.sandbox_config()
    except (TypeError, ValueError) as e:
      raise ValueError(f"sandbox: {e}") from None

  def sandbox_config(self) -> SandboxConfig:
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in self.sandbox.items()}
    return SandboxConfig(**options)

  def weights_for(self, domain: str) -> dict[str, float]:
    return {**self.weights["default"], **self.weights.get(domain, {})}


@dataclasses.dataclass
class RewardBatch:
  """Rewards for N completions.

  Attributes:
    rewards_N: the weighted sum per completion.
    correct_N: score == 1 and verified without error.
    components: component name -> [N] values (0 where absent or failed).
    verdicts: one per completion (a zero-score one for failures).
    error_kinds: per completion, None or one of ERROR_KINDS.
    error_counts: kind -> count over this batch (every kind present).
    deadline_timeouts: the `timeout` errors that the batch deadline
      (RewardConfig.batch_timeout_s) caused, a part of error_counts["timeout"].
  """
  rewards_N: np.ndarray
  correct_N: np.ndarray
  components: dict[str, np.ndarray]
  verdicts: list[Verdict]
  error_kinds: list[str | None]
  error_counts: dict[str, int]
  deadline_timeouts: int = 0

  @property
  def errors(self) -> int:
    return sum(self.error_counts.values())

  def token_rewards_NxT(self, char_ends_NxT: np.ndarray, mask_NxT: np.ndarray):
    """(score_NxT, covered_NxT): process step scores on response tokens
    (see rewards/process_credit.py); failed completions are never covered."""
    score_NxT, covered_NxT = process_credit.token_rewards_NxT(self.verdicts, char_ends_NxT,
                                                             mask_NxT)
    ok_N = np.array([k is None for k in self.error_kinds], bool)
    return score_NxT * ok_N[:, None], covered_NxT & ok_N[:, None]


def components_of(verdict: Verdict) -> dict[str, float]:
  """The named components of one verdict (see the module docstring)."""
  out = {"outcome": verdict.score, "format": float(verdict.format_ok)}
  if verdict.step_scores and "process" not in verdict.components:
    out["process"] = float(np.mean([s for _, _, s in verdict.step_scores]))
  out.update(verdict.components)
  return out


def combine(tasks: Sequence[Task], verdicts: Sequence[Verdict],
            error_kinds: Sequence[str | None], config: RewardConfig,
            deadline_timeouts: int = 0) -> RewardBatch:
  """The RewardBatch for verdicts of `tasks` (error_kinds[i] set = failed;
  `deadline_timeouts` of the "timeout" ones are the batch deadline's)."""
  n = len(tasks)
  if not n == len(verdicts) == len(error_kinds):
    raise ValueError(f"{n} tasks, {len(verdicts)} verdicts, {len(error_kinds)} error kinds")
  unknown = set(error_kinds) - set(ERROR_KINDS) - {None}
  if unknown:
    raise ValueError(f"unknown error kinds {sorted(unknown)}; known: {ERROR_KINDS}")
  per_item = [{} if kind else components_of(v) for v, kind in zip(verdicts, error_kinds)]
  names = set(BASE_COMPONENTS).union(*per_item)
  components = {k: np.array([c.get(k, 0.0) for c in per_item], np.float32) for k in sorted(names)}
  rewards_N = np.zeros(n, np.float32)
  for i, (task, c) in enumerate(zip(tasks, per_item)):
    weights = config.weights_for(task.domain)
    rewards_N[i] = sum(weights.get(k, 0.0) * value for k, value in c.items())
  correct_N = np.array([kind is None and v.correct for v, kind in zip(verdicts, error_kinds)],
                       bool)
  counts = {kind: int(sum(k == kind for k in error_kinds)) for kind in ERROR_KINDS}
  if not 0 <= deadline_timeouts <= counts["timeout"]:
    raise ValueError(f"{deadline_timeouts} deadline timeouts but {counts['timeout']} timeouts")
  return RewardBatch(rewards_N=rewards_N, correct_N=correct_N, components=components,
                     verdicts=list(verdicts), error_kinds=list(error_kinds), error_counts=counts,
                     deadline_timeouts=int(deadline_timeouts))


def reward_metrics(tasks: Sequence[Task], batch: RewardBatch, prefix: str = "reward") -> dict:
  """`<prefix>/<domain>/<component>` means, `<prefix>/errors/<kind>` counts,
  `<prefix>/<domain>/errors`, the domain's completions whose verification failed,
  and `<prefix>/deadline_timeouts`, the timeouts the batch deadline caused."""
  metrics = {f"{prefix}/errors/{kind}": count for kind, count in batch.error_counts.items()}
  metrics[f"{prefix}/deadline_timeouts"] = batch.deadline_timeouts
  domains = np.array([t.domain for t in tasks])
  failed_N = np.array([kind is not None for kind in batch.error_kinds], bool)
  for domain in sorted(set(domains.tolist())):
    sel = domains == domain
    metrics[f"{prefix}/{domain}/mean"] = float(batch.rewards_N[sel].mean())
    metrics[f"{prefix}/{domain}/errors"] = int(failed_N[sel].sum())
    for name, values in batch.components.items():
      metrics[f"{prefix}/{domain}/{name}"] = float(values[sel].mean())
  return metrics
