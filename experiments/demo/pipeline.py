"""The whole post-training pipeline in one call (what the demo runs).

tokenizer -> SFT base model -> held-out eval -> GRPO -> held-out eval ->
SFT control (more SFT from the same start, `control.num_steps` steps) ->
held-out eval -> report (completion rate before/after with a paired
confidence interval, reward curve, and the per-domain/per-level tables of
SFT start vs RL vs control from `experiments.demo.demo_tables`). Each stage
writes its own workdir under the root, so any stage can be rerun or
inspected on its own, and a rerun resumes.
"""

import os
import shutil

import ml_collections

from experiments.demo import pipeline_pretrained, pipeline_stages
from rl_post.config_sections import from_section
from rl_post.data import build_tokenizer
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.errors import ConfigError
from rl_post.rl import config as rl_config_lib
from rl_post.rl.components import rl_sections
from rl_post.sft import trainer as sft_trainer
from rl_post.training.run import (SHAPE_FIELDS, check_seed, config_changes, pretrained_path,
                                  stored_config, write_config)


def _stage_config(config, optimizer_key: str) -> ml_collections.ConfigDict:
  stage = ml_collections.ConfigDict(config.to_dict())
  stage.optimizer = config[optimizer_key]
  return stage


def _control_sft(config, sft_dir: str, control_dir: str) -> str:
  """The control arm: SFT continued from the SFT stage's last checkpoint.

  It keeps the optimizer state and draws the next demonstrations of the
  same stream (never the held-out problems) for `control.num_steps` more
  steps, with the cosine schedule stretched to the longer run. Returns the
  export dir.
  """
  extra = int(config.control.num_steps)
  stage = _stage_config(config, "sft_optimizer")
  total = int(config.sft.num_steps) + extra
  stage.sft.num_steps = total
  stage.optimizer.total_steps = total
  if not os.path.exists(os.path.join(control_dir, "checkpoints")):
    os.makedirs(control_dir, exist_ok=True)
    shutil.copytree(os.path.join(sft_dir, "checkpoints"), os.path.join(control_dir, "checkpoints"))
  sft_trainer.train(stage, control_dir)
  return os.path.join(control_dir, sft_trainer.EXPORT_DIR)


def check_stages(config: ml_collections.ConfigDict):
  """Parses every stage's sections (SFT, RL, control, evaluation) before any stage runs,
  so a bad value fails in seconds, not after the tokenizer, SFT and RL have run."""
  if pretrained_path(config):
    return pipeline_pretrained.check_stages(config)
  check_seed(config)
  sft_trainer.sft_sections(_stage_config(config, "sft_optimizer"))
  rl_sections(_stage_config(config, "optimizer"))
  if int(config.control.num_steps) < 1:
    raise ConfigError("control.num_steps", config.control.num_steps, "must be >= 1")
  batch_size = int(config.get("eval", {}).get("batch_size", 0))
  if batch_size < 0:
    raise ConfigError("eval.batch_size", batch_size, "must be >= 1 (or 0: rl's rollouts per "
                      "step)")


# what a rerun in the same workdir must keep: the model's shape and what the tokenizer
# is built from (its section, the domains of its corpus, the seed that draws it)
RERUN_FIELDS = (*(f"model.{k}" for k in SHAPE_FIELDS), "tokenizer", "tasks.domains", "seed")


def check_rerun(workdir: str, config: ml_collections.ConfigDict):
  """Raises ConfigError on --workdir when it holds a run `config` cannot go on with.

  The stages would refuse their checkpoints too, but only after the tokenizer was
  rebuilt over the run's own and workdir/config.json overwritten.
  """
  changes = config_changes(stored_config(workdir), config, sections=RERUN_FIELDS)
  if changes:
    raise ConfigError("--workdir", workdir, "holds a run of another model or tokenizer: this "
                      f"config changes {'; '.join(changes[:6])}. Rerun with the config in its "
                      "config.json, or use a new --workdir")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs every stage under `workdir`; returns the before/after evals.

  A config with `pretrained.path` runs `experiments.demo.pipeline_pretrained` instead
  (pretrained start, RFT control). `{workdir}` in tokenizer.path is replaced
  by `workdir`.
  """
  if pretrained_path(config):
    return pipeline_pretrained.run(config, workdir)
  config = ml_collections.ConfigDict(config.to_dict())
  config.tokenizer.path = config.tokenizer.path.format(workdir=os.path.abspath(workdir))
  check_stages(config)
  check_rerun(workdir, config)
  write_config(workdir, config)
  tokenizer = build_tokenizer.build(config)
  sft_dir, rl_dir = os.path.join(workdir, "sft"), os.path.join(workdir, "rl")
  sft_trainer.train(_stage_config(config, "sft_optimizer"), sft_dir)
  export_dir = os.path.join(sft_dir, sft_trainer.EXPORT_DIR)

  rl_config = _stage_config(config, "optimizer")
  rl_config.rl.init_from = export_dir
  rl = rl_config_lib.load(rl_config.rl)
  mixture = TaskMixture(from_section(TaskConfig, config.tasks, "tasks"), int(config.seed))
  before = pipeline_stages.heldout_eval(config, export_dir, tokenizer, mixture, rl, "before RL")
  after, rl_s = pipeline_stages.rl_arm(rl_config, config, tokenizer, mixture, rl, rl_dir)
  control_dir = os.path.join(workdir, "control")
  control_export, control_s = pipeline_stages.timed(control_dir, _control_sft, config, sft_dir, control_dir)
  control = pipeline_stages.heldout_eval(config, control_export, tokenizer, mixture, rl,
                                         "SFT control")
  domains = ", ".join(config.tasks.domains)
  return pipeline_stages.report(workdir, rl_dir, {"before": before, "after": after,
                                                  "control": control}, mixture.demo_levels,
                                {"rl": rl_s, "control": control_s},
                                f"rl_post demo: SFT -> GRPO on {domains}")
