"""Confidence intervals and unbiased estimators for evaluation results.

Pure numpy / stdlib (no scipy): normal quantiles come from
`statistics.NormalDist`, exact binomial tails from `math.comb`.
"""

from __future__ import annotations

import math
import statistics

import numpy as np


def _z_value(confidence: float) -> float:
  """Two-sided standard-normal quantile for `confidence` (0.95 -> 1.95996)."""
  if not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}")
  return statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _as_count(name: str, value) -> int:
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an integer count, got {value!r}")
  return int(value)


def wilson_interval(successes: int, trials: int,
                    confidence: float = 0.95) -> tuple[float, float]:
  """Wilson score interval for a binomial proportion.

  Unlike the normal ("Wald") interval it stays inside [0, 1] and is sensible
  at 0/n and n/n, which eval sets of a few dozen problems hit often.

  Args:
    successes: number of successes, 0 <= successes <= trials.
    trials: number of trials, > 0.
    confidence: two-sided coverage, e.g. 0.95.

  Returns:
    (low, high) bounds of the interval for the success probability.
  """
  successes = _as_count("successes", successes)
  trials = _as_count("trials", trials)
  if trials <= 0:
    raise ValueError(f"trials must be > 0, got {trials}")
  if not 0 <= successes <= trials:
    raise ValueError(
        f"successes must be in [0, trials={trials}], got {successes}")
  z = _z_value(confidence)
  p = successes / trials
  z2_n = z * z / trials
  denom = 1.0 + z2_n
  center = (p + z2_n / 2.0) / denom
  half = z * math.sqrt(p * (1.0 - p) / trials + z2_n / (4.0 * trials)) / denom
  # At 0/n and n/n the bound is exactly 0 / 1; avoid float residue there.
  low = 0.0 if successes == 0 else max(0.0, center - half)
  high = 1.0 if successes == trials else min(1.0, center + half)
  return low, high


def _as_bool_vector(name: str, x) -> np.ndarray:
  x = np.asarray(x)
  if x.ndim != 1:
    raise ValueError(f"{name} must be 1-D (one entry per problem), got shape {x.shape}")
  if x.dtype == np.bool_:
    return x
  if np.issubdtype(x.dtype, np.integer) and np.isin(x, (0, 1)).all():
    return x.astype(bool)
  raise ValueError(
      f"{name} must be a boolean array (or 0/1 integers), got dtype {x.dtype}")


def mcnemar_p_value(num_improved: int, num_regressed: int) -> float:
  """Exact two-sided McNemar p-value from the discordant pair counts.

  Under H0 each discordant pair is improved or regressed with probability 1/2,
  so the smaller count is Binomial(b + c, 1/2); the p-value doubles its tail.

  Returns:
    p-value in [0, 1]; 1.0 when there are no discordant pairs.
  """
  b = _as_count("num_improved", num_improved)
  c = _as_count("num_regressed", num_regressed)
  if b < 0 or c < 0:
    raise ValueError(f"counts must be >= 0, got {b} and {c}")
  n = b + c
  if n == 0:
    return 1.0
  tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
  # Integer / integer true division is correctly rounded even for huge n.
  return min(1.0, 2 * tail / 2**n)


def paired_difference_ci(before_correct, after_correct,
                         confidence: float = 0.95) -> dict[str, float]:
  """Change in completion rate on the same problems, with CI and p-value.

  The interval is the paired normal approximation on per-problem
  differences d_i = after_i - before_i in {-1, 0, 1}:
  mean(d) +- z * std(d, ddof=1) / sqrt(N). The p-value is the exact McNemar
  test on the discordant pairs.

  Args:
    before_correct: bool [N], problem i solved before training.
    after_correct: bool [N], the same problems after training.
    confidence: two-sided coverage of the interval.

  Returns:
    dict with `diff` (after rate - before rate), `low`, `high`, `p_value`,
    plus `n`, `num_improved` (0 -> 1) and `num_regressed` (1 -> 0).
  """
  before_N = _as_bool_vector("before_correct", before_correct)
  after_N = _as_bool_vector("after_correct", after_correct)
  if before_N.shape != after_N.shape:
    raise ValueError(
        "before_correct and after_correct must cover the same problems, got "
        f"shapes {before_N.shape} and {after_N.shape}")
  n = before_N.shape[0]
  if n < 2:
    raise ValueError(f"need at least 2 paired problems for an interval, got {n}")
  z = _z_value(confidence)
  d_N = after_N.astype(np.float64) - before_N.astype(np.float64)
  diff = float(d_N.mean())
  half = z * float(d_N.std(ddof=1)) / math.sqrt(n)
  num_improved = int(np.sum(after_N & ~before_N))
  num_regressed = int(np.sum(before_N & ~after_N))
  return {
      "diff": diff,
      "low": diff - half,
      "high": diff + half,
      "p_value": mcnemar_p_value(num_improved, num_regressed),
      "n": n,
      "num_improved": num_improved,
      "num_regressed": num_regressed,
  }


def pass_at_k(num_samples, num_correct, k: int):
  """Unbiased pass@k estimator, 1 - C(n-c, k) / C(n, k), per problem.

  Uses the stable product form 1 - prod_{j=n-c+1}^{n} (1 - k / j), so large n
  never forms huge binomials.

  Args:
    num_samples: n, samples drawn per problem; int or int array [P].
    num_correct: c, correct samples per problem; broadcastable with n.
    k: the k of pass@k, 1 <= k <= n.

  Returns:
    float for scalar inputs, else a float64 array of the broadcast shape.
  """
  k = _as_count("k", k)
  n = np.asarray(num_samples)
  c = np.asarray(num_correct)
  for name, arr in (("num_samples", n), ("num_correct", c)):
    if not np.issubdtype(arr.dtype, np.integer):
      raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
  n, c = np.broadcast_arrays(n, c)
  if k < 1:
    raise ValueError(f"k must be >= 1, got {k}")
  if (n < k).any():
    raise ValueError(f"num_samples must be >= k={k}, got min {int(n.min())}")
  if (c < 0).any() or (c > n).any():
    raise ValueError("num_correct must be in [0, num_samples] for every problem")
  scalar = n.ndim == 0
  n_P = n.reshape(-1).astype(np.int64)
  c_P = c.reshape(-1).astype(np.int64)
  max_c = int(c_P.max()) if c_P.size else 0
  # Row p holds j = n-c+1 .. n (c valid entries), padded to max_c columns.
  m_PxM = np.arange(max_c)[None, :]
  valid_PxM = m_PxM < c_P[:, None]
  j_PxM = np.where(valid_PxM, (n_P - c_P + 1)[:, None] + m_PxM, 1)
  prod_P = np.prod(1.0 - k / j_PxM, axis=1, where=valid_PxM)
  out_P = np.where(n_P - c_P < k, 1.0, 1.0 - prod_P)
  if scalar:
    return float(out_P[0])
  return out_P.reshape(n.shape)
