"""Per-domain and per-difficulty statistics of one step's scored completions.

Keys (all floats, for the metric writers):
  domain/<d>/count, domain/<d>/pass_rate, domain/<d>/reward,
  domain/<d>/<component>            mean of each reward component,
  domain/<d>/errors                 completions whose verification failed (the
                                    reward path's error kinds: timeout, crash,
                                    verifier_error, invalid_verdict; a wrong or
                                    unparseable answer is not an error),
  domain/<d>/difficulty/<k>/count, domain/<d>/difficulty/<k>/pass_rate.
"""

from typing import Mapping, Sequence

import numpy as np

from rl_post.tasks.base import Task, Verdict


def passed(verdicts: Sequence[Verdict]) -> np.ndarray:
  """bool per completion: the task was completed (score == 1)."""
  return np.array([v.correct for v in verdicts], bool)


def domain_metrics(tasks_N: Sequence[Task], verdicts_N: Sequence[Verdict], rewards_N,
                   components: Mapping[str, np.ndarray],
                   error_kinds_N: Sequence[str | None]) -> dict[str, float]:
  """Statistics per domain and per (domain, difficulty) of N scored completions
  (`error_kinds_N`: RewardBatch.error_kinds, None where verification ran)."""
  n = len(tasks_N)
  if len(verdicts_N) != n or len(error_kinds_N) != n or np.shape(rewards_N) != (n,) or any(
      np.shape(v) != (n,) for v in components.values()):
    raise ValueError(f"domain_metrics needs N={n} verdicts, rewards and component values, got "
                     f"{len(verdicts_N)}, {len(error_kinds_N)} error kinds, {np.shape(rewards_N)}, "
                     f"{ {k: np.shape(v) for k, v in components.items()} }")
  ok_N = passed(verdicts_N)
  errors_N = np.array([kind is not None for kind in error_kinds_N], bool)
  rewards_N = np.asarray(rewards_N, np.float64)
  domain_N = np.array([t.domain for t in tasks_N], object)
  level_N = np.array([t.difficulty for t in tasks_N])
  out = {}
  for d in sorted(set(domain_N.tolist())):
    sel = domain_N == d
    p = f"domain/{d}"
    out[f"{p}/count"] = float(sel.sum())
    out[f"{p}/pass_rate"] = float(ok_N[sel].mean())
    out[f"{p}/reward"] = float(rewards_N[sel].mean())
    out[f"{p}/errors"] = float(errors_N[sel].sum())
    for name, values in components.items():
      out[f"{p}/{name}"] = float(np.asarray(values, np.float64)[sel].mean())
    for k in sorted(set(level_N[sel].tolist())):
      at = sel & (level_N == k)
      out[f"{p}/difficulty/{k}/count"] = float(at.sum())
      out[f"{p}/difficulty/{k}/pass_rate"] = float(ok_N[at].mean())
  return out
