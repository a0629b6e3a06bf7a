"""The demo's plots over seeds (matplotlib Agg), from seeds.json and each seed's RL metrics.

  seeds_arms.png    greedy held-out completion of the three arms (SFT start,
                    after GRPO, SFT control; the pretrained demo's pretrained
                    start and RFT control) averaged over domains and per
                    (domain, level): mean over seeds (bar), std (error bar)
                    and every seed (dots)
  seeds_curves.png  per RL step and seed: reward (rolling mean), KL to the
                    reference and policy entropy

`write` is what `seed_runs` calls after the seeds ran, and what
`experiments/plot_seeds.py` calls on a recorded result. Like
`rl_post.eval.plots`, it draws only values seeds.json or metrics.jsonl hold.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl_post.errors import ConfigError, MissingInputError, reading
from rl_post.eval import plots
from rl_post.metrics.writers import read_metrics

ARMS = (("before", "SFT start"), ("after", "after GRPO"), ("control", "SFT control"))
ARMS_PNG, CURVES_PNG = "seeds_arms.png", "seeds_curves.png"


def arm_groups(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, list[float]]]]:
  """[(label, {arm: [rate per seed]})]: "all domains" (macro) first, then each
  (domain, level) cell that every seed has, in the first seed's order.

  Raises ValueError when a row lacks the demo's control arm (`cells`, macro_*).
  """
  if not rows:
    raise ValueError("need at least one seed row")
  lacking = [r.get("seed") for r in rows
             if "cells" not in r or any(f"macro_{a}" not in r for a, _ in ARMS)]
  if lacking:
    raise ValueError(f"seed rows {lacking} have no control-arm tables (cells, macro_*): "
                     "seeds.json of a demo config with a `control` section is needed")
  groups = [("all domains", {a: [float(r[f"macro_{a}"]) for r in rows] for a, _ in ARMS})]
  keyed = [{(c["domain"], c["level"]): c for c in r["cells"]} for r in rows]
  for cell in rows[0]["cells"]:
    key = (cell["domain"], cell["level"])
    if all(key in k for k in keyed):
      label = f"{key[0]} L{key[1]}" + ("\n(no demos)" if cell["demonstrations"] is False else "")
      groups.append((label, {a: [float(k[key][a]) for k in keyed] for a, _ in ARMS}))
  return groups


def plot_arms(path: str, rows: Sequence[Mapping[str, Any]], *, title: str) -> None:
  """Writes seeds_arms.png from seeds.json's rows (see module docstring)."""
  groups = arm_groups(rows)
  fig = Figure(figsize=(max(8, 1.4 * len(groups)), 4), layout="constrained")
  FigureCanvasAgg(fig)
  ax = fig.subplots()
  x_G, width = np.arange(len(groups)), 0.27
  names = rows[0].get("names") or {}  # the demo's own arm names (a pretrained start's)
  for i, (arm, default) in enumerate(ARMS):
    name = "after GRPO" if arm == "after" else names.get(arm, default)
    values = [100 * np.asarray(g[1][arm]) for g in groups]
    means = [v.mean() for v in values]
    stds = [v.std(ddof=1) if v.size > 1 else 0.0 for v in values]
    offset = (i - 1) * width
    ax.bar(x_G + offset, means, width=width, yerr=stds, capsize=3, label=name)
    for g, (x, v) in enumerate(zip(x_G + offset, values)):
      ax.scatter(np.full(v.size, x), v, s=12, color="black", zorder=3,
                 label="one seed" if i == g == 0 else None)
  ax.set_xticks(x_G, [g[0] for g in groups])
  ax.set_ylim(0, 105)
  ax.set_ylabel("greedy held-out completion (%)")
  ax.set_title(f"{title} (n = {len(rows)} seeds; bar: mean, error bar: std)")
  ax.legend(loc="best", fontsize="small")
  fig.savefig(path, dpi=100)


def plot_curves(path: str, metrics_by_seed: Mapping[int, Sequence[Mapping[str, Any]]], *,
                title: str, window: int = 10) -> None:
  """Writes seeds_curves.png: reward (rolling mean), KL and entropy per step, one line
  per seed. KL is `kl` (to the reference) when logged, else `approx_kl_old`."""
  if not metrics_by_seed:
    raise ValueError("need the RL metrics of at least one seed")
  fig = Figure(figsize=(8, 7.5), layout="constrained")
  FigureCanvasAgg(fig)
  ax_reward, ax_kl, ax_entropy = fig.subplots(3, 1, sharex=True)
  for seed, metrics in metrics_by_seed.items():
    steps, reward = plots.series(metrics, plots.REWARD_KEY)
    if steps.size:
      ax_reward.plot(steps, plots.rolling_mean(reward, window), label=f"seed {seed}")
    kl_key = next((k for k in plots.KL_KEYS if plots.series(metrics, k)[0].size), None)
    if kl_key:
      ax_kl.plot(*plots.series(metrics, kl_key), label=f"seed {seed} ({kl_key})")
    ax_entropy.plot(*plots.series(metrics, plots.ENTROPY_KEY), label=f"seed {seed}")
  ax_reward.set_ylabel(f"reward (rolling mean, {window})")
  ax_reward.set_title(title)
  ax_kl.set_ylabel("KL")
  ax_entropy.set_ylabel("entropy (nats/token)")
  ax_entropy.set_xlabel("RL step")
  for ax in (ax_reward, ax_kl, ax_entropy):
    if ax.get_legend_handles_labels()[0]:
      ax.legend(loc="best", fontsize="small")
  fig.savefig(path, dpi=100)


def load_seeds(path: str, field: str = "--seeds_json") -> dict[str, Any]:
  """Reads a seeds.json and checks it holds what `write` draws.

  Raises:
    MissingInputError: naming `field`, when the file is missing, is not JSON,
      or is not a demo's seeds.json (a dict whose `rows` are per-seed dicts
      with the control arm's tables).
  """
  if not os.path.isfile(path):
    raise MissingInputError(field, path, "no such file (demo_seeds.py writes one)")
  with reading(field, path, "is not a JSON file"), open(path, encoding="utf-8") as f:
    result = json.load(f)
  rows = result.get("rows") if isinstance(result, dict) else None
  if (not isinstance(rows, list) or not rows
      or not all(isinstance(r, dict) and "seed" in r for r in rows)):
    raise MissingInputError(field, path, "is not a seeds.json: needs a non-empty list of "
                            "per-seed dicts under 'rows' (demo_seeds.py writes one)")
  try:
    arm_groups(rows)
  except (ValueError, KeyError, TypeError) as e:
    raise MissingInputError(field, path, f"cannot be plotted ({type(e).__name__}: {e})") from e
  return result


def write(seeds_result: Mapping[str, Any], metrics_dir_template: str, out_dir: str, *,
          title: str = "rl_post demo", field: str = "--metrics_dir") -> dict[str, str]:
  """Both PNGs into out_dir; returns {"arms": path, "curves": path}.

  Args:
    seeds_result: seeds.json's dict (`experiments.demo.seed_runs.run`'s output).
    metrics_dir_template: the folder holding seed s's RL metrics.jsonl, with
      "{seed}" in it (demo_seeds.py: "<workdir>/seed_{seed}/rl").
    out_dir: where the PNGs go (created).
    field: the flag the template came from, named in errors.
  Raises:
    ConfigError: the template lacks "{seed}".
    MissingInputError: a seed's metrics.jsonl is missing or garbled.
  """
  if "{seed}" not in metrics_dir_template:
    raise ConfigError(field, metrics_dir_template, "needs '{seed}' (one folder per seed)")
  rows = seeds_result["rows"]
  metrics = {}
  for r in rows:
    folder = metrics_dir_template.format(seed=r["seed"])
    try:
      metrics[r["seed"]] = read_metrics(folder)
    except (FileNotFoundError, ValueError) as e:
      raise MissingInputError(field, folder, f"seed {r['seed']}: {e}") from e
  os.makedirs(out_dir, exist_ok=True)
  paths = {"arms": os.path.join(out_dir, ARMS_PNG), "curves": os.path.join(out_dir, CURVES_PNG)}
  plot_arms(paths["arms"], rows, title=title)
  plot_curves(paths["curves"], metrics, title=f"{title}: the RL stage per seed")
  return paths
