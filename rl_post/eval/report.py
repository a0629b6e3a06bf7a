"""Run report: reward curve plot, Markdown and JSON summaries of evals.

Eval results are per-problem arrays; every breakdown (per domain, per
difficulty, before vs after) is computed here from them:

  evals = {
      "before": {
          "correct": np.ndarray[bool] [N],     # required: problem i solved
          "domain": list[str] [N],             # optional
          "difficulty": np.ndarray[int] [N],   # optional
      },
      "after": {...},                          # same N problems, same order
      "<any name>": {...},                     # other eval sets
  }

Every "before<suffix>" with a matching "after<suffix>" (e.g. "before" and
"after", "before_sampled" and "after_sampled") is compared pairwise
(`stats.paired_difference_ci`), so they must list the same problems.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl_post.eval import stats

EVAL_KEYS = ("correct", "domain", "difficulty")
REWARD_KEY = "reward/mean"
PASS_RATE_PREFIX = "pass_rate/"


def _validate_eval(name: str, ev: Any) -> dict[str, np.ndarray]:
  """Checks one eval entry; returns its arrays (domain/difficulty optional)."""
  if not isinstance(ev, Mapping):
    raise ValueError(f"evals[{name!r}] must be a dict, got {type(ev).__name__}")
  unknown = sorted(set(ev) - set(EVAL_KEYS))
  if unknown:
    raise ValueError(
        f"evals[{name!r}] has unknown keys {unknown}; allowed: {list(EVAL_KEYS)}")
  if "correct" not in ev:
    raise ValueError(f"evals[{name!r}] needs a 'correct' array (bool per problem)")
  correct_N = np.asarray(ev["correct"])
  if correct_N.ndim != 1 or correct_N.size == 0:
    raise ValueError(
        f"evals[{name!r}]['correct'] must be a non-empty 1-D array, got shape "
        f"{correct_N.shape}")
  if correct_N.dtype != np.bool_:
    raise ValueError(
        f"evals[{name!r}]['correct'] must have dtype bool, got {correct_N.dtype}")
  out = {"correct": correct_N}
  n = correct_N.shape[0]
  if "domain" in ev:
    domain_N = np.asarray(ev["domain"])
    if domain_N.shape != (n,) or not all(isinstance(d, str) for d in ev["domain"]):
      raise ValueError(
          f"evals[{name!r}]['domain'] must be {n} strings (one per problem), "
          f"got shape {domain_N.shape}")
    out["domain"] = domain_N
  if "difficulty" in ev:
    difficulty_N = np.asarray(ev["difficulty"])
    if difficulty_N.shape != (n,) or not np.issubdtype(difficulty_N.dtype, np.integer):
      raise ValueError(
          f"evals[{name!r}]['difficulty'] must be {n} integers (one per "
          f"problem), got shape {difficulty_N.shape} dtype {difficulty_N.dtype}")
    out["difficulty"] = difficulty_N
  return out


def completion_summary(correct_N: np.ndarray,
                       confidence: float = 0.95) -> dict[str, float]:
  """Completion rate of a bool [N] array with its Wilson interval.

  Returns:
    dict with n, num_correct, completion_rate, ci_low, ci_high.
  """
  n, k = int(correct_N.size), int(np.sum(correct_N))
  low, high = stats.wilson_interval(k, n, confidence)
  return {"n": n, "num_correct": k, "completion_rate": k / n,
          "ci_low": low, "ci_high": high}


def summarize_eval(ev: Mapping[str, Any], name: str = "eval") -> dict:
  """Overall, per-domain and per-difficulty completion for one eval entry.

  Args:
    ev: one entry of `evals` (see the module docstring).
    name: used in error messages.

  Returns:
    `completion_summary` fields, plus `by_domain` / `by_difficulty`
    {group: completion_summary} when the entry has those arrays.
  """
  arrays = _validate_eval(name, ev)
  correct_N = arrays["correct"]
  out = completion_summary(correct_N)
  for key, by_key in (("domain", "by_domain"), ("difficulty", "by_difficulty")):
    if key in arrays:
      groups_N = arrays[key]
      out[by_key] = {
          str(g): completion_summary(correct_N[groups_N == g])
          for g in sorted(set(groups_N.tolist()))
      }
  return out


def compare_before_after(before: Mapping[str, Any],
                         after: Mapping[str, Any]) -> dict[str, float]:
  """Paired change from the "before" to the "after" eval of the same problems."""
  b = _validate_eval("before", before)
  a = _validate_eval("after", after)
  if b["correct"].shape != a["correct"].shape:
    raise ValueError(
        "evals 'before' and 'after' must list the same problems, got "
        f"{b['correct'].size} and {a['correct'].size} problems")
  for key in ("domain", "difficulty"):
    if key in b and key in a and not np.array_equal(b[key], a[key]):
      raise ValueError(
          f"evals 'before' and 'after' disagree on '{key}': they must list the "
          "same problems in the same order")
  return stats.paired_difference_ci(b["correct"], a["correct"])


def rolling_mean(values_T: np.ndarray, window: int) -> np.ndarray:
  """Trailing mean over the last `window` values (fewer at the start)."""
  if not isinstance(window, int) or window < 1:
    raise ValueError(f"window must be an int >= 1, got {window!r}")
  values_T = np.asarray(values_T, dtype=np.float64)
  csum = np.concatenate([[0.0], np.cumsum(values_T)])
  idx = np.arange(1, values_T.size + 1)
  start = np.maximum(idx - window, 0)
  return (csum[idx] - csum[start]) / (idx - start)


def _series(metrics: Sequence[Mapping[str, Any]], key: str):
  """(steps, values) of `key`, skipping records without it or with null."""
  pairs = [(r["step"], r[key]) for r in metrics
           if r.get(key) is not None and math.isfinite(r[key])]
  steps = np.array([p[0] for p in pairs], dtype=np.int64)
  values = np.array([p[1] for p in pairs], dtype=np.float64)
  return steps, values


def plot_metrics(path: str, metrics: Sequence[Mapping[str, Any]], *,
                 title: str, window: int = 10) -> None:
  """Writes a PNG: reward/mean (raw + rolling mean), and pass_rate/* below."""
  pass_keys = sorted({k for r in metrics for k in r if k.startswith(PASS_RATE_PREFIX)})
  fig = Figure(figsize=(8, 6 if pass_keys else 3.5), layout="constrained")
  FigureCanvasAgg(fig)  # Agg without pyplot: no global backend state.
  axes = fig.subplots(2 if pass_keys else 1, 1, sharex=True, squeeze=False)[:, 0]
  steps, reward = _series(metrics, REWARD_KEY)
  ax = axes[0]
  if steps.size:
    ax.plot(steps, reward, alpha=0.3, label=REWARD_KEY)
    ax.plot(steps, rolling_mean(reward, window),
            label=f"rolling mean (window {window})")
    ax.legend(loc="best")
  else:
    ax.text(0.5, 0.5, f"no {REWARD_KEY} in metrics", ha="center",
            va="center", transform=ax.transAxes)
  ax.set_ylabel("reward")
  ax.set_title(title)
  if pass_keys:
    for key in pass_keys:
      ax_steps, values = _series(metrics, key)
      axes[1].plot(ax_steps, values, label=key[len(PASS_RATE_PREFIX):])
    axes[1].set_ylabel("pass rate")
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].legend(loc="best", fontsize="small")
  axes[-1].set_xlabel("step")
  fig.savefig(path, dpi=100)


def _pct(x: float) -> str:
  return f"{100 * x:.1f}%"


def _row(label: str, s: Mapping[str, float]) -> str:
  return (f"| {label} | {_pct(s['completion_rate'])} | "
          f"[{_pct(s['ci_low'])}, {_pct(s['ci_high'])}] | {s['n']} |")


def render_markdown(title: str, summaries: Mapping[str, dict],
                    comparisons: Mapping[str, dict], plot_name: str | None) -> str:
  """The summary.md text: completion table, breakdown rows, before vs after."""
  lines = [f"# {title}", ""]
  if plot_name:
    lines += [f"![reward curve]({plot_name})", ""]
  lines += ["## Task completion", "",
            "| eval | completion rate | 95% CI (Wilson) | n |",
            "|---|---|---|---|"]
  for name, s in summaries.items():
    lines.append(_row(name, s))
    for group, sub in s.get("by_domain", {}).items():
      lines.append(_row(f"{name} / domain={group}", sub))
    for group, sub in s.get("by_difficulty", {}).items():
      lines.append(_row(f"{name} / difficulty={group}", sub))
  for suffix, c in comparisons.items():
    label = f"before{suffix} vs after{suffix}" if suffix else "Before vs after"
    lines += [
        "",
        f"**{label}** (n={c['n']} paired problems): "
        f"{100 * c['diff']:+.1f} pp, 95% CI [{100 * c['low']:+.1f}, "
        f"{100 * c['high']:+.1f}] pp; exact McNemar p = {c['p_value']:.4g} "
        f"({c['num_improved']} improved, {c['num_regressed']} regressed).",
    ]
  return "\n".join(lines) + "\n"


def write_report(report_dir: str | os.PathLike, *,
                 metrics: Sequence[Mapping[str, Any]],
                 evals: Mapping[str, Mapping[str, Any]], title: str,
                 rolling_window: int = 10) -> dict[str, str]:
  """Writes reward.png, summary.md and summary.json into `report_dir`.

  Args:
    report_dir: output directory; created if missing.
    metrics: per-step records as from `metrics.writers.read_metrics` (each a
      dict with "step"; uses `reward/mean` and any `pass_rate/*`).
    evals: name -> per-problem results; shape in the module docstring.
    title: heading of the report and plot.
    rolling_window: steps in the reward rolling mean.

  Returns:
    {"reward_plot": ..., "summary_md": ..., "summary_json": ...} paths.
  """
  if not isinstance(title, str) or not title:
    raise ValueError("title must be a non-empty string")
  for i, r in enumerate(metrics):
    if not isinstance(r, Mapping) or "step" not in r:
      raise ValueError(f"metrics[{i}] must be a dict with a 'step' key, got {r!r}")
  if not isinstance(evals, Mapping):
    raise ValueError(f"evals must be a dict of name -> eval, got {type(evals).__name__}")
  summaries = {name: summarize_eval(ev, name) for name, ev in evals.items()}
  # Every "before<suffix>" with a matching "after<suffix>" is compared pairwise.
  comparisons = {name[len("before"):]: compare_before_after(evals[name],
                                                             evals["after" + name[len("before"):]])
                 for name in evals
                 if name.startswith("before") and "after" + name[len("before"):] in evals}

  report_dir = os.fspath(report_dir)
  os.makedirs(report_dir, exist_ok=True)
  paths = {
      "reward_plot": os.path.join(report_dir, "reward.png"),
      "summary_md": os.path.join(report_dir, "summary.md"),
      "summary_json": os.path.join(report_dir, "summary.json"),
  }
  plot_metrics(paths["reward_plot"], metrics, title=title, window=rolling_window)
  with open(paths["summary_md"], "w", encoding="utf-8") as f:
    f.write(render_markdown(title, summaries, comparisons, "reward.png"))
  _, reward = _series(metrics, REWARD_KEY)
  summary = {
      "title": title,
      "evals": summaries,
      "before_vs_after": comparisons.get(""),
      "comparisons": comparisons,
      "training": {
          "num_records": len(metrics),
          "last_step": max((r["step"] for r in metrics), default=None),
          "final_reward_mean_rolling": (
              float(rolling_mean(reward, rolling_window)[-1]) if reward.size else None),
      },
  }
  with open(paths["summary_json"], "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2)
  return paths


def render_checkpoint_eval(result: Mapping[str, Any]) -> str:
  """eval.md for `rl_post.eval.checkpoint_eval.evaluate_checkpoint`'s result."""
  settings = result["settings"]
  ks = [str(k) for k in settings["ks"]]
  n = settings["num_samples"]
  lines = [f"# Evaluation of `{result['checkpoint']}`", "",
           f"Held-out problems; greedy decoding (one response each) and sampling at "
           f"T={settings['temperature']} (n={n} responses each; pass@k is the unbiased "
           f"estimator 1 - C(n-c, k) / C(n, k)). Max {settings['max_new_tokens']} new tokens.",
           "",
           "| group | problems | greedy | greedy 95% CI | "
           + " | ".join(f"pass@{k}" for k in ks) + " | mean len greedy | mean len sampled |",
           "|---|---|---|---|" + "---|" * len(ks) + "---|---|"]
  for name, g in result["groups"].items():
    greedy, sampled = g["greedy"], g["sampled"]
    passes = " | ".join(_pct(sampled["pass_at_k"][k]) for k in ks)
    lines.append(f"| {name} | {g['n']} | {_pct(greedy['completion_rate'])} | "
                 f"[{_pct(greedy['ci_low'])}, {_pct(greedy['ci_high'])}] | {passes} | "
                 f"{greedy['mean_response_len']:.1f} | {sampled['mean_response_len']:.1f} |")
  for mode, counts in result.get("verifier_errors", {}).items():
    nonzero = {kind: count for kind, count in counts.items() if count}
    lines += ["", f"Verifier errors ({mode}, scored 0): "
              + (", ".join(f"{kind} {count}" for kind, count in nonzero.items()) or "none")]
  return "\n".join(lines) + "\n"
