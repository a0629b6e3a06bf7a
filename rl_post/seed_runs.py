"""The demo pipeline over several seeds: per-seed rows, mean and spread.

Seed s runs `pipeline.run` with `config.seed = s` under workdir/seed_<s>
(a rerun resumes each seed's stages), then `rl_post.eval.seeds` reduces the
before/after completion rates into workdir/seeds.json and seeds.md.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence

import jax
import ml_collections
from absl import logging

from rl_post import pipeline
from rl_post.errors import ConfigError
from rl_post.eval import seeds as seeds_lib


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
          "backend": jax.default_backend()}


def run(config: ml_collections.ConfigDict, workdir: str, seeds: Sequence[int], *,
        command: str = "") -> dict:
  """Runs the demo once per seed; writes and returns {"rows", "aggregate", ...}.

  Args:
    config: the demo config (`configs/demo.py`); its `seed` is replaced.
    workdir: root folder; seed s runs in workdir/seed_<s>.
    seeds: distinct integers >= 0.
    command: the command line, recorded in the outputs.

  Returns:
    {"rows": [...], "aggregate": {...}, "machine": {...}, "command": ...,
     "paths": {"json": ..., "md": ...}}.
  """
  seeds = check_seeds(seeds)
  os.makedirs(workdir, exist_ok=True)
  rows, start = [], time.monotonic()
  for i, seed in enumerate(seeds):
    seed_config = ml_collections.ConfigDict(config.to_dict())
    seed_config.seed = seed
    seed_start = time.monotonic()
    result = pipeline.run(seed_config, os.path.join(workdir, f"seed_{seed}"))
    with open(result["report"]["summary_json"]) as f:
      row = seeds_lib.seed_row(seed, json.load(f))
    row["wall_s"] = time.monotonic() - seed_start
    rows.append(row)
    elapsed = time.monotonic() - start
    logging.info("seed %d done (%d/%d) in %.0f s; greedy %.1f%% -> %.1f%% (control %.1f%%); "
                 "ETA %.0f s", seed, i + 1, len(seeds), row["wall_s"], 100 * row["before"],
                 100 * row["after"], 100 * row.get("control", float("nan")),
                 elapsed / (i + 1) * (len(seeds) - i - 1))
  out = {"command": command, "machine": machine_info(), "rows": rows,
         "aggregate": seeds_lib.aggregate(rows)}
  paths = {"json": os.path.join(workdir, "seeds.json"), "md": os.path.join(workdir, "seeds.md")}
  with open(paths["json"], "w", encoding="utf-8") as f:
    json.dump(out, f, indent=2)
  with open(paths["md"], "w", encoding="utf-8") as f:
    f.write(seeds_lib.render_markdown(f"rl_post demo over seeds {seeds}", rows,
                                      out["aggregate"], command, out["machine"]))
  out["paths"] = paths
  return out
