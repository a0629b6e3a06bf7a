"""The demo pipeline over several seeds: per-seed rows, mean and spread.

Seed s runs `pipeline.run` with `config.seed = s` under workdir/seed_<s>
(a rerun resumes each seed's stages), then `experiments.demo.seeds` reduces the
before/after completion rates into workdir/seeds.json and seeds.md.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import platform
import time
from collections.abc import Sequence

import jax
import ml_collections
from absl import logging

from experiments.demo import pipeline, seed_plots
from experiments.demo import seeds as seeds_lib
from rl_post.errors import ConfigError
from rl_post.metrics import host_cpu


def check_seeds(seeds: Sequence[int | str]) -> list[int]:
  """The seeds as ints; a ConfigError (--seeds) for none, non-integers, negatives or repeats."""
  if not seeds:
    raise ConfigError("--seeds", list(seeds), "need at least one seed, e.g. --seeds=0,1,2")
  out = []
  for s in seeds:
    text = str(s).strip()
    if not text.isdigit():
      raise ConfigError("--seeds", list(seeds), f"seeds must be integers >= 0, got {s!r}")
    out.append(int(text))
  if len(set(out)) != len(out):
    raise ConfigError("--seeds", list(seeds),
                      "a seed repeats (the same seed gives the same numbers)")
  return out


def machine_info() -> dict:
  """What the figures were measured on (they vary across machines)."""
  return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
          "cpu_count": os.cpu_count(), "jax": jax.__version__,
          "backend": jax.default_backend(), "cpu": host_cpu.one_line(host_cpu.describe())}


SEED_RESULT = "seed_result.json"


def log_like_parent(verbosity: int):
  """A spawned seed worker logs at the parent's verbosity, to stderr (its progress lines)."""
  logging.use_absl_handler()
  logging.set_verbosity(verbosity)


def _finished(seed_dir: str, config_dict: dict) -> dict | None:
  """The seed's recorded result when it finished with this very config, else None."""
  path = os.path.join(seed_dir, SEED_RESULT)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    recorded = json.load(f)
  as_json = json.loads(json.dumps(config_dict))  # tuples read back as lists
  return recorded if recorded.get("config") == as_json else None


def _seed_summary(config_dict: dict, seed: int, seed_dir: str) -> tuple[dict, float]:
  """One seed's pipeline; returns (its summary.json, wall seconds). Runs in a worker.

  A seed that finished with the same config is not run again: its recorded
  summary and wall-clock come back (workdir/seed_<s>/seed_result.json).
  """
  seed_config = ml_collections.ConfigDict(config_dict)
  seed_config.seed = seed
  config_dict = seed_config.to_dict()
  recorded = _finished(seed_dir, config_dict)
  if recorded is not None:
    logging.info("seed %d finished earlier with this config: its result is reused (%s)", seed,
                 os.path.join(seed_dir, SEED_RESULT))
    return recorded["summary"], recorded["wall_s"]
  start = time.monotonic()
  result = pipeline.run(seed_config, seed_dir)
  with open(result["report"]["summary_json"]) as f:
    summary = json.load(f)
  wall_s = time.monotonic() - start
  with open(os.path.join(seed_dir, SEED_RESULT + ".partial"), "w", encoding="utf-8") as f:
    json.dump(dict(config=config_dict, wall_s=wall_s, summary=summary), f)
  os.replace(os.path.join(seed_dir, SEED_RESULT + ".partial"), os.path.join(seed_dir, SEED_RESULT))
  return summary, wall_s


def run(config: ml_collections.ConfigDict, workdir: str, seeds: Sequence[int], *,
        command: str = "", jobs: int = 1) -> dict:
  """Runs the demo once per seed; writes and returns {"rows", "aggregate", ...}.

  Args:
    config: the demo config (`configs/demo.py`); its `seed` is replaced.
    workdir: root folder; seed s runs in workdir/seed_<s>.
    seeds: distinct integers >= 0.
    command: the command line, recorded in the outputs.
    jobs: seeds run at once. Each seed runs in a fresh spawned process, so
      the memory one seed's stages leave behind is returned before the next
      seed starts. A seed's numbers do not depend on it (only the wall-clock
      figures do). A seed that finished with the same config is reused.

  Returns:
    {"rows": [...], "aggregate": {...}, "machine": {...}, "command": ...,
     "paths": {"json": ..., "md": ...}}; with the demo's control arm also
    "arms" and "curves" in paths, its PNGs over seeds (`seed_plots`).
  """
  seeds = check_seeds(seeds)
  if jobs < 1:
    raise ConfigError("--jobs", jobs, "must be >= 1")
  for seed in seeds:  # every stage of every seed, before the first one runs
    pipeline.check_stages(ml_collections.ConfigDict(dict(config.to_dict(), seed=seed)))
  os.makedirs(workdir, exist_ok=True)
  rows, start = [], time.monotonic()
  config_dict = config.to_dict()
  dirs = {seed: os.path.join(workdir, f"seed_{seed}") for seed in seeds}

  def add_row(seed, summary, wall_s):
    row = seeds_lib.seed_row(seed, summary)
    row["wall_s"] = wall_s
    rows.append(row)
    elapsed = time.monotonic() - start
    logging.info("seed %d done (%d/%d) in %.0f s; greedy %.1f%% -> %.1f%% (control %.1f%%); "
                 "ETA %.0f s", seed, len(rows), len(seeds), wall_s, 100 * row["before"],
                 100 * row["after"], 100 * row.get("control", float("nan")),
                 elapsed / len(rows) * (len(seeds) - len(rows)) / min(jobs, len(seeds)))

  spawn = multiprocessing.get_context("spawn")  # JAX does not survive fork
  # one process per seed: a process that ran every stage of a seed holds on to memory
  # (compiled programs, allocator pages) that the next seed's stages would add to
  with concurrent.futures.ProcessPoolExecutor(min(jobs, len(seeds)), mp_context=spawn,
                                              max_tasks_per_child=1, initializer=log_like_parent,
                                              initargs=(logging.get_verbosity(),)) as pool:
    futures = {pool.submit(_seed_summary, config_dict, seed, dirs[seed]): seed for seed in seeds}
    for future in concurrent.futures.as_completed(futures):
      add_row(futures[future], *future.result())
  rows.sort(key=lambda r: seeds.index(r["seed"]))
  out = {"command": command, "machine": machine_info(), "rows": rows,
         "aggregate": seeds_lib.aggregate(rows)}
  paths = {"json": os.path.join(workdir, "seeds.json"), "md": os.path.join(workdir, "seeds.md")}
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump(out, f, indent=2)
  with open(paths["md"], "w", encoding="utf-8") as f:
    f.write(seeds_lib.render_markdown(f"rl_post demo over seeds {seeds}", rows,
                                      out["aggregate"], command, out["machine"]))
  if "macro_after" in out["aggregate"]:  # the demo's control arm: its plots over seeds
    paths.update(seed_plots.write(out, os.path.join(workdir, "seed_{seed}", "rl"), workdir))
  out["paths"] = paths
  return out
