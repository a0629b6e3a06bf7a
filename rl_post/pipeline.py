"""The whole post-training pipeline in one call (what the demo runs).

tokenizer -> SFT base model -> held-out eval -> GRPO -> held-out eval ->
report (completion rate before/after with a paired confidence interval,
reward curve). Each stage writes its own workdir under the root, so any
stage can be rerun or inspected on its own, and a rerun resumes.
"""

import functools
import os

import jax
import ml_collections
from absl import logging

from rl_post.checkpoint.params import load_params, save_params
from rl_post.config_sections import from_section
from rl_post.data import build_tokenizer
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.eval.completion import evaluate
from rl_post.eval.report import write_report
from rl_post.metrics.writers import read_metrics
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rl import trainer as rl_trainer
from rl_post.rl import config as rl_config_lib
from rl_post.rl.config import RLConfig
from rl_post.sampling.sampler import SamplingConfig
from rl_post.sft import trainer as sft_trainer
from rl_post.training import state as state_lib
from rl_post.training.run import model_config_from, write_config


def _stage_config(config, optimizer_key: str) -> ml_collections.ConfigDict:
  stage = ml_collections.ConfigDict(config.to_dict())
  stage.optimizer = config[optimizer_key]
  return stage


def _heldout_eval(config, export_dir, tokenizer, mixture, rl: RLConfig, tag: str) -> dict:
  """Greedy and sampled completion on the held-out set for exported params."""
  model_config = model_config_from(config, tokenizer)
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.sharding_rules)
  params = load_params(export_dir, state_lib.abstract_sharded_params(model_config, mesh, rules))
  results = {}
  for mode, sampling in (("greedy", SamplingConfig(rl.max_new_tokens, greedy=True)),
                         ("sampled", SamplingConfig(rl.max_new_tokens, rl.temperature))):
    results[mode] = evaluate(model_config, params, tokenizer, mixture.heldout, sampling=sampling,
                             max_prompt_len=rl.max_prompt_len, batch_size=rl.rollouts_per_step,
                             rng=jax.random.key(int(config.seed) + 1),
                             shard=functools.partial(sharding.shard_batch, mesh=mesh, rules=rules),
                             domain_options=config.tasks.domain_options.to_dict())
    logging.info("%s held-out %s completion rate: %.3f", tag, mode,
                 results[mode]["completion_rate"])
  return results


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs every stage under `workdir`; returns the before/after evals.

  `{workdir}` in tokenizer.path is replaced by `workdir`.
  """
  config = ml_collections.ConfigDict(config.to_dict())
  config.tokenizer.path = config.tokenizer.path.format(workdir=os.path.abspath(workdir))
  write_config(workdir, config)
  tokenizer = build_tokenizer.build(config)
  sft_dir, rl_dir = os.path.join(workdir, "sft"), os.path.join(workdir, "rl")
  sft_trainer.train(_stage_config(config, "sft_optimizer"), sft_dir)
  export_dir = os.path.join(sft_dir, sft_trainer.EXPORT_DIR)

  rl_config = _stage_config(config, "optimizer")
  rl_config.rl.init_from = export_dir
  rl = rl_config_lib.load(rl_config.rl)
  mixture = TaskMixture(from_section(TaskConfig, config.tasks, "tasks"), int(config.seed))
  before = _heldout_eval(config, export_dir, tokenizer, mixture, rl, "before RL")
  result = rl_trainer.train(rl_config, rl_dir)
  rl_export = os.path.join(rl_dir, "export")
  save_params(rl_export, result["context"].model_config, result["state"].params)
  after = _heldout_eval(config, rl_export, tokenizer, mixture, rl, "after RL")

  evals = {"before": before["greedy"], "after": after["greedy"],
           "before_sampled": before["sampled"], "after_sampled": after["sampled"]}
  per_problem = {name: {k: ev[k] for k in ("correct", "domain", "difficulty")}
                 for name, ev in evals.items()}
  paths = write_report(os.path.join(workdir, "report"), metrics=read_metrics(rl_dir),
                       evals=per_problem, title="rl_post demo: SFT base -> GRPO on arithmetic")
  return {"evals": evals, "report": paths}
