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
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rl_post.eval import plots, stats
from rl_post.eval.plots import REWARD_KEY, rolling_mean  # noqa: F401  (public here too)

EVAL_KEYS = ("correct", "domain", "difficulty")


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


def _pct(x: float) -> str:
  return f"{100 * x:.1f}%"


def _row(label: str, s: Mapping[str, float]) -> str:
  return (f"| {label} | {_pct(s['completion_rate'])} | "
          f"[{_pct(s['ci_low'])}, {_pct(s['ci_high'])}] | {s['n']} |")


def render_markdown(title: str, summaries: Mapping[str, dict],
                    comparisons: Mapping[str, dict],
                    images: Mapping[str, str] | None = None) -> str:
  """The summary.md text: plots, completion table, breakdown rows, before vs after.

  `images` maps a caption to a PNG path relative to the Markdown file.
  """
  lines = [f"# {title}", ""]
  for caption, name in (images or {}).items():
    lines += [f"![{caption}]({name})", ""]
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


_CAPTIONS = {
    "pass_rate_plot": "completion per domain before vs after RL",
    "curves_plot": "reward, KL and entropy per RL step",
    "difficulty_plot": "curriculum difficulty per RL step",
    "reward_plot": "reward curve",
}


def _before_after_pairs(summaries: Mapping[str, dict]) -> dict[str, tuple[dict, dict]]:
  """Panel label -> (before, after) summaries, for pairs broken down by domain."""
  pairs = {}
  for name, before in summaries.items():
    suffix = name[len("before"):]
    after = summaries.get("after" + suffix)
    if name.startswith("before") and after and "by_domain" in before and "by_domain" in after:
      pairs[suffix.lstrip("_") or "greedy"] = (before, after)
  return pairs


def _write_plots(report_dir: str, metrics, summaries, title: str, window: int) -> dict[str, str]:
  """Writes the PNGs the data supports; returns {kind: path} in Markdown order."""
  paths = {}
  pairs = _before_after_pairs(summaries)
  if pairs:
    paths["pass_rate_plot"] = os.path.join(report_dir, "pass_rate.png")
    plots.plot_pass_rate_by_domain(paths["pass_rate_plot"], pairs, title=title)
  paths["curves_plot"] = os.path.join(report_dir, "curves.png")
  plots.plot_training_curves(paths["curves_plot"], metrics, title=title, window=window)
  if plots.curriculum_domains(metrics):
    paths["difficulty_plot"] = os.path.join(report_dir, "difficulty.png")
    plots.plot_difficulty(paths["difficulty_plot"], metrics, title=title)
  paths["reward_plot"] = os.path.join(report_dir, "reward.png")
  plots.plot_metrics(paths["reward_plot"], metrics, title=title, window=window)
  return paths


def write_report(report_dir: str | os.PathLike, *,
                 metrics: Sequence[Mapping[str, Any]],
                 evals: Mapping[str, Mapping[str, Any]], title: str,
                 rolling_window: int = 10) -> dict[str, str]:
  """Writes the plots, summary.md and summary.json into `report_dir`.

  Plots (see `rl_post.eval.plots`): reward.png and curves.png always;
  pass_rate.png when a before/after pair is broken down by domain;
  difficulty.png when the metrics hold curriculum/<d>/difficulty.

  Args:
    report_dir: output directory; created if missing.
    metrics: per-step records as from `metrics.writers.read_metrics` (each a
      dict with "step"; uses `reward/mean` and any `pass_rate/*`).
    evals: name -> per-problem results; shape in the module docstring.
    title: heading of the report and plot.
    rolling_window: steps in the reward rolling mean.

  Returns:
    {"reward_plot", "curves_plot", ["pass_rate_plot",] ["difficulty_plot",]
    "summary_md", "summary_json"} -> path.
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
  paths = _write_plots(report_dir, metrics, summaries, title, rolling_window)
  images = {_CAPTIONS[key]: os.path.basename(path) for key, path in paths.items()}
  paths["summary_md"] = os.path.join(report_dir, "summary.md")
  paths["summary_json"] = os.path.join(report_dir, "summary.json")
  with open(paths["summary_md"], "w", encoding="utf-8") as f:
    f.write(render_markdown(title, summaries, comparisons, images))
  _, reward = plots.series(metrics, REWARD_KEY)
  summary = {
      "title": title,
      "plots": {key: os.path.basename(path) for key, path in paths.items()
                if key.endswith("_plot")},
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


def _reward_component_lines(groups: Mapping[str, Any]) -> list[str]:
  """A table of the greedy responses' mean reward and its named components per group."""
  names = sorted({name for g in groups.values()
                  for name in g["greedy"].get("reward_components", {})})
  if not names:
    return []
  lines = ["", "Greedy responses' mean reward and its components (before the domain's weights):",
           "", "| group | reward | " + " | ".join(names) + " |",
           "|---|---|" + "---|" * len(names)]
  for group, g in groups.items():
    parts = g["greedy"].get("reward_components", {})
    lines.append(f"| {group} | {g['greedy'].get('mean_reward', 0.0):.3f} | "
                 + " | ".join(f"{parts.get(name, 0.0):.3f}" for name in names) + " |")
  return lines


def render_checkpoint_eval(result: Mapping[str, Any]) -> str:
  """eval.md for `rl_post.evaluate.checkpoint_eval.evaluate_checkpoint`'s result."""
  settings = result["settings"]
  ks = [str(k) for k in settings["ks"]]
  n = settings["num_samples"]
  lines = [f"# Evaluation of `{result['checkpoint']}`", "",
           f"Held-out problems; greedy decoding (one response each) and sampling at "
           f"T={settings['temperature']} (n={n} responses each; pass@k is the unbiased "
           f"estimator 1 - C(n-c, k) / C(n, k)). Max {settings['max_new_tokens']} new tokens. "
           "Completion is answer-only (the answer read in the domain's answer format); "
           "the strict columns also need the format followed strictly.",
           "",
           "| group | problems | greedy | greedy 95% CI | greedy strict | "
           + " | ".join(f"pass@{k}" for k in ks)
           + " | pass@1 strict | mean len greedy | mean len sampled |",
           "|---|---|---|---|---|" + "---|" * len(ks) + "---|---|---|"]
  for name, g in result["groups"].items():
    greedy, sampled = g["greedy"], g["sampled"]
    passes = " | ".join(_pct(sampled["pass_at_k"][k]) for k in ks)
    lines.append(f"| {name} | {g['n']} | {_pct(greedy['completion_rate'])} | "
                 f"[{_pct(greedy['ci_low'])}, {_pct(greedy['ci_high'])}] | "
                 f"{_pct(greedy.get('strict_completion_rate', float('nan')))} | {passes} | "
                 f"{_pct(sampled.get('strict_completion_rate', float('nan')))} | "
                 f"{greedy['mean_response_len']:.1f} | {sampled['mean_response_len']:.1f} |")
  lines += _reward_component_lines(result["groups"])
  for mode, counts in result.get("verifier_errors", {}).items():
    nonzero = {kind: count for kind, count in counts.items() if count}
    lines += ["", f"Verifier errors ({mode}, scored 0): "
              + (", ".join(f"{kind} {count}" for kind, count in nonzero.items()) or "none")]
  return "\n".join(lines) + "\n"
