"""Settings chosen on a validation seed: RL runs over a small grid, ranked by held-out completion.

    points = grid_points(config, parse_grid(config, ["rl.grpo.kl_coef=0,0.01,0.04"]))
    run(config, workdir, seed=100, points=points)   # one RL run per point, then the table

The grid varies one key at a time around the config as given (the "as
configured" point runs once), or every combination with `product=True`.
Each point is `rl_post.rl.trainer.train` from the config's start (e.g. the
pretrained model) with `seed` set and its overrides applied, in its own
spawned process under workdir/<point name> (a rerun resumes it). The run's
held-out evaluation (`rl.eval_every` and the last step; `tasks.heldout_size`
problems of the seed's own held-out set) gives each point's greedy and
sampled completion. The choice is the point with the highest final greedy
completion; ties go to the higher sampled completion, then to the earlier
point (the config as given comes first). With a few dozen held-out
problems the points' intervals overlap: the table says so, and the choice is
a choice, not a finding. The validation seed should not be one of the seeds
the results are reported on.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import math
import multiprocessing
import os
import time

import ml_collections
from absl import logging

from experiments.demo import seed_runs
from rl_post.errors import ConfigError
from rl_post.eval import stats
from rl_post.metrics.writers import read_metrics

AS_CONFIGURED = "as configured"
GREEDY, SAMPLED = "eval/pass_rate", "eval_sampled/pass_rate"


def _lookup(config: ml_collections.ConfigDict, key: str):
  node = config
  for part in key.split("."):
    if not isinstance(node, (ml_collections.ConfigDict, dict)) or part not in node:
      raise ConfigError("--grid", key, "names no field of the config")
    node = node[part]
  return node


def _parse_value(key: str, text: str, like):
  """`text` as the type of the config's current value `like` (bool, int, float or str)."""
  text = text.strip()
  try:
    if isinstance(like, bool):
      if text.lower() not in ("true", "false"):
        raise ValueError(text)
      return text.lower() == "true"
    if isinstance(like, int):
      return int(text)
    if isinstance(like, float):
      value = float(text)
      if not math.isfinite(value):
        raise ValueError(text)
      return value
    if isinstance(like, str):
      return text
  except ValueError:
    raise ConfigError("--grid", f"{key}={text}", f"is not a {type(like).__name__}") from None
  raise ConfigError("--grid", key, f"holds a {type(like).__name__}; only bool, int, float and "
                    "str fields can be varied")


def parse_grid(config: ml_collections.ConfigDict, specs: list[str]) -> dict[str, list]:
  """{"rl.grpo.kl_coef": [0.0, 0.01], ...} from ["key=v1,v2", ...]; ConfigError on a bad spec."""
  if not specs:
    raise ConfigError("--grid", specs, "give at least one key=v1,v2,... to vary")
  grid = {}
  for spec in specs:
    key, sep, values = spec.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
      raise ConfigError("--grid", spec, "must read key=v1,v2,... (e.g. rl.grpo.kl_coef=0,0.04)")
    if key == "seed":
      raise ConfigError("--grid", spec, "the seed is --seed; the grid varies settings")
    if key in grid:
      raise ConfigError("--grid", spec, f"{key} is given twice")
    like = _lookup(config, key)
    parsed = [_parse_value(key, v, like) for v in values.split(",")]
    if len(set(parsed)) != len(parsed):
      raise ConfigError("--grid", spec, "a value repeats")
    grid[key] = parsed
  return grid


def _name(overrides: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in overrides.items()) or AS_CONFIGURED


def grid_points(config: ml_collections.ConfigDict, grid: dict[str, list],
                product: bool = False) -> list[tuple[str, dict]]:
  """[(name, {key: value}), ...]: the config as given first, then the points that differ from it.

  One at a time: each key's values with every other key as configured.
  `product`: every combination of the keys' values.
  """
  center = {k: _lookup(config, k) for k in grid}
  if product:
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
  else:
    combos = [{**center, k: v} for k, values in grid.items() for v in values]
  points, seen = [(AS_CONFIGURED, {})], {json.dumps(center, sort_keys=True)}
  for combo in combos:
    if json.dumps(combo, sort_keys=True) in seen:
      continue
    seen.add(json.dumps(combo, sort_keys=True))
    overrides = {k: v for k, v in combo.items() if v != center[k]}
    points.append((_name(overrides), overrides))
  return points


def point_config(config: ml_collections.ConfigDict, seed: int,
                 overrides: dict) -> ml_collections.ConfigDict:
  """A copy of `config` with `seed` and the point's overrides set."""
  out = ml_collections.ConfigDict(config.to_dict())
  out.seed = seed
  for key, value in overrides.items():
    *parents, leaf = key.split(".")
    node = out
    for part in parents:
      node = node[part]
    node[leaf] = value
  return out


def wilson(rate: float, n: int) -> tuple[float, float]:
  """The 95% Wilson interval of a rate over n problems (nan without problems)."""
  if n <= 0:
    return (float("nan"), float("nan"))
  return stats.wilson_interval(round(rate * n), n)


def point_result(rows: list[dict], heldout_size: int) -> dict:
  """A run's held-out curve and final greedy / sampled completion from its metrics rows."""
  evals = [r for r in rows if GREEDY in r]
  if not evals:
    raise ValueError("the run logged no held-out evaluation: set tasks.heldout_size > 0")
  last = evals[-1]
  domains = {k[len("eval/"):-len("/pass_rate")]: v for k, v in last.items()
             if k != GREEDY and k.startswith("eval/") and k.endswith("/pass_rate")
             and "/difficulty_" not in k}
  return {"step": last["step"], "greedy": last[GREEDY], "sampled": last.get(SAMPLED),
          "greedy_interval": wilson(last[GREEDY], heldout_size), "domains": domains,
          "curve": [(r["step"], r[GREEDY], r.get(SAMPLED)) for r in evals]}


def choose(results: list[dict]) -> dict:
  """The best point: final greedy, then sampled, then the earlier point."""
  key = lambda i: (results[i]["greedy"], results[i]["sampled"] or 0.0, -i)
  return results[max(range(len(results)), key=key)]


def _train(config_dict: dict, workdir: str) -> float:
  """One point's RL run in a spawned worker; its wall seconds."""
  from rl_post.rl import trainer  # noqa: PLC0415 (the worker's own JAX)
  start = time.monotonic()
  trainer.train(ml_collections.ConfigDict(config_dict), workdir)
  return time.monotonic() - start


def _dir_name(name: str) -> str:
  return "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)


def render_markdown(out: dict) -> str:
  lines = [f"# Validation seed {out['seed']}: {len(out['rows'])} points", "",
           f"    {out['command']}", "", f"Machine: {out['machine']['cpu']}. Held-out problems: "
           f"{out['heldout_size']}; final greedy completion with its 95% Wilson interval.", "",
           "| point | greedy | 95% interval | sampled | curve (step: greedy) | wall s |",
           "|---|---|---|---|---|---|"]
  for r in out["rows"]:
    lo, hi = r["greedy_interval"]
    sampled = "" if r["sampled"] is None else f"{100 * r['sampled']:.1f}%"
    curve = ", ".join(f"{s}: {100 * g:.1f}" for s, g, _ in r["curve"])
    lines.append(f"| {r['name']} | {100 * r['greedy']:.1f}% | [{100 * lo:.1f}, {100 * hi:.1f}] "
                 f"| {sampled} | {curve} | {r['wall_s']:.0f} |")
  chosen = out["chosen"]
  lines += ["", f"Chosen: **{chosen['name']}** (highest final greedy completion; ties to sampled, "
            "then to the earlier point)."]
  if out["intervals_overlap"]:
    lines.append("Every point's interval overlaps the chosen one's: on this many problems the "
                 "points are not told apart; the choice is a choice, not a finding.")
  return "\n".join(lines) + "\n"


def run(config: ml_collections.ConfigDict, workdir: str, *, seed: int,
        points: list[tuple[str, dict]], command: str = "", jobs: int = 1) -> dict:
  """Trains each point on `seed`, writes workdir/validation.{json,md}; returns the table."""
  from rl_post.rl.components import rl_sections  # noqa: PLC0415
  if not isinstance(seed, int) or seed < 0:
    raise ConfigError("--seed", seed, "must be an integer >= 0")
  if jobs < 1:
    raise ConfigError("--jobs", jobs, "must be >= 1")
  heldout_size = int(config.tasks.heldout_size)
  if heldout_size <= 0:
    raise ConfigError("tasks.heldout_size", heldout_size, "must be > 0: points are ranked by "
                      "held-out completion")
  configs = {name: point_config(config, seed, o) for name, o in points}
  for c in configs.values():  # every point's sections parse before the first one runs
    rl_sections(c)
  os.makedirs(workdir, exist_ok=True)
  dirs = {name: os.path.join(workdir, _dir_name(name)) for name, _ in points}
  spawn = multiprocessing.get_context("spawn")  # JAX does not survive fork
  walls = {}
  with concurrent.futures.ProcessPoolExecutor(
      min(jobs, len(points)), mp_context=spawn, max_tasks_per_child=1,
      initializer=seed_runs.log_like_parent, initargs=(logging.get_verbosity(),)) as pool:
    futures = {pool.submit(_train, configs[name].to_dict(), dirs[name]): name
               for name, _ in points}
    for future in concurrent.futures.as_completed(futures):
      walls[futures[future]] = future.result()
      logging.info("validation point %r done in %.0f s", futures[future], walls[futures[future]])
  rows = []
  for name, overrides in points:
    row = point_result(read_metrics(dirs[name]), heldout_size)
    rows.append(dict(name=name, overrides=overrides, workdir=dirs[name], wall_s=walls[name], **row))
  chosen = choose(rows)
  overlap = all(r["greedy_interval"][1] >= chosen["greedy_interval"][0] for r in rows)
  out = {"command": command, "seed": seed, "heldout_size": heldout_size,
         "machine": seed_runs.machine_info(), "rows": rows, "chosen": chosen,
         "intervals_overlap": overlap}
  paths = {"json": os.path.join(workdir, "validation.json"),
           "md": os.path.join(workdir, "validation.md")}
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump(out, f, indent=2)
  with open(paths["md"], "w", encoding="utf-8") as f:
    f.write(render_markdown(out))
  out["paths"] = paths
  return out
