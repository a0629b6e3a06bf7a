"""Stages both demo pipelines share: held-out evaluation of an arm, timing, the tables.

`experiments.demo.pipeline` (tokenizer -> SFT -> RL, SFT control) and
`experiments.demo.pipeline_pretrained` (pretrained -> RL, RFT control) evaluate
their arms the same way and write the same summary tables.
"""

import functools
import json
import os
import time

import jax
import ml_collections
import numpy as np
from absl import logging

from experiments.demo import demo_tables
from rl_post.checkpoint.params import save_params
from rl_post.eval.completion import evaluate
from rl_post.eval.report import write_report
from rl_post.evaluate import checkpoint_eval
from rl_post.metrics.writers import read_metrics
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rl import trainer as rl_trainer
from rl_post.rl.config import RLConfig
from rl_post.sampling.sampler import SamplingConfig


def heldout_eval(config, checkpoint: str, tokenizer, mixture, rl: RLConfig, tag: str) -> dict:
  """Greedy and sampled (rl.temperature) held-out completion of a checkpoint
  (an export, a training workdir, a .gguf file or a HF folder).

  The same rng for every arm: arm differences are the params' alone.
  """
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.sharding_rules)
  loaded = checkpoint_eval.load_checkpoint(checkpoint, config, tokenizer, mesh, rules)
  results = {}
  for mode, sampling in (("greedy", SamplingConfig(rl.max_new_tokens, greedy=True)),
                         ("sampled", SamplingConfig(rl.max_new_tokens, rl.temperature))):
    results[mode] = evaluate(loaded.model_config, loaded.params, tokenizer, mixture.heldout,
                             sampling=sampling, max_prompt_len=rl.max_prompt_len,
                             batch_size=int(config.get("eval", {}).get("batch_size", 0)
                                            or rl.rollouts_per_step),
                             rng=jax.random.key(int(config.seed) + 1),
                             shard=functools.partial(sharding.shard_batch, mesh=mesh, rules=rules),
                             domain_options=config.tasks.domain_options.to_dict())
    logging.info("%s held-out %s completion: %.3f answer-only, %.3f strict", tag, mode,
                 results[mode]["completion_rate"], results[mode]["strict_completion_rate"])
  return results


STAGE_TIME_FILE = "stage_wall_s.json"


def timed(stage_dir: str, fn, *args):
  """(fn(*args), the stage's wall-clock seconds over every run of it so far).

  A stage that resumes (a rerun of the pipeline over the same workdir) adds
  this run's seconds to those its earlier runs recorded in
  stage_dir/stage_wall_s.json (a run that raised included), so a resumed or
  already finished stage reports the time it took in all, not the seconds
  its restore took.
  """
  path = os.path.join(stage_dir, STAGE_TIME_FILE)
  earlier = {"seconds": 0.0, "runs": 0}
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      earlier = json.load(f)
  start = time.monotonic()
  try:
    out = fn(*args)
  finally:  # a run that fails spent its time on the stage too (a killed one is lost)
    total = {"seconds": float(earlier["seconds"]) + time.monotonic() - start,
             "runs": int(earlier["runs"]) + 1}
    os.makedirs(stage_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      json.dump(total, f)
  return out, total["seconds"]


def write_demo_tables(paths: dict, tables: dict, wall_s: dict, names=None) -> None:
  """Adds the demo tables to summary.json ("demo") and summary.md (`names`: the arms')."""
  with open(paths["summary_json"]) as f:
    summary = json.load(f)
  summary["demo"] = dict(tables, wall_s=wall_s)
  with open(paths["summary_json"], "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2)
  with open(paths["summary_md"], "a", encoding="utf-8") as f:
    f.write("\n" + demo_tables.render_markdown(tables, wall_s, names))


def rl_arm(rl_config, config, tokenizer, mixture, rl: RLConfig, rl_dir: str) -> tuple[dict, float]:
  """Trains RL with `rl_config` in rl_dir, exports its params to rl_dir/export and
  evaluates them; (the held-out evals, the training's wall-clock seconds). The
  trainer skips its own evaluation after the last step: this one (greedy and
  sampled) covers it, and `heldout_curve` reads its greedy result as that step's."""
  rl_config = ml_collections.ConfigDict(rl_config.to_dict())
  rl_config.rl.eval_at_end = False
  result, rl_s = timed(rl_dir, rl_trainer.train, rl_config, rl_dir)
  export = os.path.join(rl_dir, "export")
  save_params(export, result["context"].model_config, result["state"].params,
              tokenizer=result["context"].tokenizer)
  return heldout_eval(config, export, tokenizer, mixture, rl, "after RL"), rl_s


def report(workdir: str, rl_dir: str, arms: dict, demo_levels, wall_s: dict, title: str,
           names=None) -> dict:
  """The report of the three arms' held-out evals ({"before", "after", "control"} ->
  {"greedy", "sampled"}): workdir/report with the demo tables (answer-only completion,
  and format-strict and sampled averaged over domains; `demo_levels` as in
  `demo_tables.demo_tables`); returns evals, report paths, tables, times."""
  evals = {arm: arms[arm]["greedy"] for arm in demo_tables.ARMS}
  evals.update({f"{arm}_sampled": arms[arm]["sampled"] for arm in demo_tables.ARMS})
  per_problem = {name: {k: ev[k] for k in ("correct", "domain", "difficulty")}
                 for name, ev in evals.items()}
  paths = write_report(os.path.join(workdir, "report"), metrics=read_metrics(rl_dir),
                       evals=per_problem, title=title)
  tables = demo_tables.demo_tables(per_problem, demo_levels)
  domain_N = np.asarray(evals["before"]["domain"])
  tables["macro_strict"] = {arm: demo_tables.macro_rate(np.asarray(evals[arm]["strict_correct"]),
                                                        domain_N)
                            for arm in demo_tables.ARMS}
  tables["macro_sampled"] = {arm: demo_tables.macro_rate(np.asarray(evals[f"{arm}_sampled"]
                                                                    ["correct"]), domain_N)
                             for arm in demo_tables.ARMS}
  tables["names"] = demo_tables.arm_names(names)
  write_demo_tables(paths, tables, wall_s, names)
  logging.info("greedy completion averaged over domains: %s", ", ".join(
      f"{arm} {tables['macro'][arm]['rate']:.3f}" for arm in demo_tables.ARMS))
  return {"evals": evals, "report": paths, "tables": tables, "wall_s": wall_s}
