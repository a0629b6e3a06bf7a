"""The report's PNG plots (matplotlib Agg, no pyplot global state).

  reward.png      reward/mean (raw + rolling mean) and pass_rate/* per step
  curves.png      reward, KL and entropy per step (metrics.jsonl)
  pass_rate.png   completion per domain before vs after RL, 95% Wilson bars
  difficulty.png  curriculum/<d>/difficulty per step (expected training level)

Every function takes plain data (metrics records, eval summaries) and writes
one file; none of them computes a statistic the JSON summary does not hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

REWARD_KEY = "reward/mean"
PASS_RATE_PREFIX = "pass_rate/"
# KL to the reference policy ("kl", logged when kl_coef > 0) and to the
# rollout policy ("approx_kl_old", always logged by the RL step).
KL_KEYS = ("kl", "approx_kl_old")
ENTROPY_KEY = "entropy"
CURRICULUM_PREFIX, DIFFICULTY_SUFFIX = "curriculum/", "/difficulty"


def rolling_mean(values_T: np.ndarray, window: int) -> np.ndarray:
  """Trailing mean over the last `window` values (fewer at the start)."""
  if not isinstance(window, int) or window < 1:
    raise ValueError(f"window must be an int >= 1, got {window!r}")
  values_T = np.asarray(values_T, dtype=np.float64)
  csum = np.concatenate([[0.0], np.cumsum(values_T)])
  idx = np.arange(1, values_T.size + 1)
  start = np.maximum(idx - window, 0)
  return (csum[idx] - csum[start]) / (idx - start)


def series(metrics: Sequence[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps_T, values_T) of `key`, skipping records without it or with null/NaN."""
  pairs = [(r["step"], r[key]) for r in metrics
           if r.get(key) is not None and math.isfinite(r[key])]
  steps_T = np.array([p[0] for p in pairs], dtype=np.int64)
  values_T = np.array([p[1] for p in pairs], dtype=np.float64)
  return steps_T, values_T


def curriculum_domains(metrics: Sequence[Mapping[str, Any]]) -> list[str]:
  """Domains with a `curriculum/<d>/difficulty` value in any record."""
  return sorted({k[len(CURRICULUM_PREFIX):-len(DIFFICULTY_SUFFIX)] for r in metrics for k in r
                 if k.startswith(CURRICULUM_PREFIX) and k.endswith(DIFFICULTY_SUFFIX)})


def _figure(rows: int, height: float) -> tuple[Figure, np.ndarray]:
  """A figure of `rows` panels over a shared integer step axis."""
  fig = Figure(figsize=(8, height), layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
  axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
  return fig, axes


def _missing(ax, what: str) -> None:
  ax.text(0.5, 0.5, f"no {what} in metrics", ha="center", va="center", transform=ax.transAxes)


def plot_metrics(path: str, metrics: Sequence[Mapping[str, Any]], *,
                 title: str, window: int = 10) -> None:
  """Writes a PNG: reward/mean (raw + rolling mean), and pass_rate/* below."""
  pass_keys = sorted({k for r in metrics for k in r if k.startswith(PASS_RATE_PREFIX)})
  fig, axes = _figure(2 if pass_keys else 1, 6 if pass_keys else 3.5)
  _plot_reward(axes[0], metrics, window)
  axes[0].set_title(title)
  if pass_keys:
    for key in pass_keys:
      axes[1].plot(*series(metrics, key), label=key[len(PASS_RATE_PREFIX):])
    axes[1].set_ylabel("pass rate")
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].legend(loc="best", fontsize="small")
  axes[-1].set_xlabel("step")
  fig.savefig(path, dpi=100)


def _plot_reward(ax, metrics, window: int) -> None:
  steps, reward = series(metrics, REWARD_KEY)
  if steps.size:
    ax.plot(steps, reward, alpha=0.3, label=REWARD_KEY)
    ax.plot(steps, rolling_mean(reward, window), label=f"rolling mean (window {window})")
    ax.legend(loc="best", fontsize="small")
  else:
    _missing(ax, REWARD_KEY)
  ax.set_ylabel("reward")


def plot_training_curves(path: str, metrics: Sequence[Mapping[str, Any]], *,
                         title: str, window: int = 10) -> None:
  """Writes a PNG with three panels per step: reward, KL, entropy."""
  fig, (ax_reward, ax_kl, ax_entropy) = _figure(3, 7.5)
  _plot_reward(ax_reward, metrics, window)
  ax_reward.set_title(title)
  kl_keys = [k for k in KL_KEYS if series(metrics, k)[0].size]
  for key in kl_keys:
    ax_kl.plot(*series(metrics, key), label=key)
  if kl_keys:
    ax_kl.legend(loc="best", fontsize="small")
  else:
    _missing(ax_kl, " or ".join(KL_KEYS))
  ax_kl.set_ylabel("KL")
  steps, entropy = series(metrics, ENTROPY_KEY)
  if steps.size:
    ax_entropy.plot(steps, entropy)
  else:
    _missing(ax_entropy, ENTROPY_KEY)
  ax_entropy.set_ylabel("entropy (nats/token)")
  ax_entropy.set_xlabel("step")
  fig.savefig(path, dpi=100)


def plot_difficulty(path: str, metrics: Sequence[Mapping[str, Any]], *, title: str) -> None:
  """Writes a PNG: each domain's expected training difficulty per step."""
  domains = curriculum_domains(metrics)
  if not domains:
    raise ValueError("metrics hold no curriculum/<domain>/difficulty values to plot")
  fig, (ax,) = _figure(1, 3.5)
  for d in domains:
    ax.plot(*series(metrics, f"{CURRICULUM_PREFIX}{d}{DIFFICULTY_SUFFIX}"), label=d)
  ax.legend(loc="best", fontsize="small")
  ax.set_ylabel("expected difficulty level")
  ax.set_xlabel("step")
  ax.set_title(title)
  fig.savefig(path, dpi=100)


def plot_pass_rate_by_domain(path: str, pairs: Mapping[str, tuple[dict, dict]], *,
                             title: str) -> None:
  """Writes a PNG: per-domain completion before vs after, one panel per pair.

  Args:
    path: PNG path.
    pairs: panel label (e.g. "greedy") -> (before, after) summaries as from
      `report.summarize_eval`, each with `by_domain`.
    title: figure title.
  """
  if not pairs:
    raise ValueError("pairs must hold at least one (before, after) summary pair")
  fig = Figure(figsize=(8, 3.2 * len(pairs)), layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(len(pairs), 1, squeeze=False)[:, 0]
  for ax, (label, (before, after)) in zip(axes, pairs.items()):
    if "by_domain" not in before or "by_domain" not in after:
      raise ValueError(f"pair {label!r}: both summaries need 'by_domain'")
    domains = sorted(set(before["by_domain"]) | set(after["by_domain"]))
    groups = [("all", before, after)] + [(d, before["by_domain"].get(d), after["by_domain"].get(d))
                                         for d in domains]
    x_G = np.arange(len(groups))
    for offset, idx, name in ((-0.2, 1, "before RL"), (0.2, 2, "after RL")):
      rates, err_low, err_high = [], [], []
      for g in groups:
        s = g[idx]
        rate = s["completion_rate"] if s else float("nan")
        rates.append(100 * rate)
        err_low.append(100 * (rate - s["ci_low"]) if s else 0.0)
        err_high.append(100 * (s["ci_high"] - rate) if s else 0.0)
      ax.bar(x_G + offset, rates, width=0.4, yerr=[err_low, err_high], capsize=3, label=name)
    ax.set_xticks(x_G, [g[0] for g in groups], rotation=30 if len(groups) > 6 else 0)
    ax.set_ylim(0, 105)
    ax.set_ylabel(f"{label} completion (%)")
    ax.legend(loc="best", fontsize="small")
  axes[0].set_title(title)
  fig.savefig(path, dpi=100)
