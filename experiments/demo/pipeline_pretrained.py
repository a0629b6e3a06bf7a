"""The demo from a pretrained chat model: base -> RL, against rejection-sampling fine-tuning.

pretrained model (`pretrained.path`) -> held-out eval -> RL (`rl`, from the
pretrained weights) -> held-out eval; the control: rejection-sampling
fine-tuning from the same weights with the RL run's sample budget (the
model's own verified samples, no gold demonstrations; `control` section:
SFT steps, batch and optimizer) -> held-out eval -> report (the same
tables and plots as the from-scratch demo, with the pretrained model as the
start). Stages write their own workdirs under the root (rl/, control/), so
a rerun resumes each.
"""

import json
import os

import ml_collections
from absl import logging

from experiments.demo import pipeline_stages
from rl_post.config_sections import from_section
from rl_post.data import batching
from rl_post.data.hf_tokenizer import load_tokenizer
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.errors import ConfigError
from rl_post.rl import config as rl_config_lib
from rl_post.rl.components import rl_sections
from rl_post.sft import rejection
from rl_post.sft import trainer as sft_trainer
from rl_post.training.run import check_seed, pretrained_path, write_config

ARM_NAMES = {"before": "pretrained start", "control": "RFT control"}


def control_config(config: ml_collections.ConfigDict, samples_path: str):
  """The RFT arm's SFT config: `control.sft` on the collected samples, `control.optimizer`."""
  stage = ml_collections.ConfigDict(config.to_dict())
  stage.sft = dict(config.control.sft.to_dict(), dataset=samples_path)
  stage.optimizer = config.control.optimizer
  return stage


def check_stages(config: ml_collections.ConfigDict):
  """Parses every stage's sections before any stage runs (a bad value fails in seconds)."""
  check_seed(config)
  if not pretrained_path(config):
    raise ConfigError("pretrained.path", "", "is required for the pretrained pipeline")
  rl_sections(config)
  if "control" not in config or "sft" not in config.control:
    raise ConfigError("control.sft", None, "is required: the RFT control's SFT settings")
  sft_trainer.sft_sections(control_config(config, "samples.jsonl"))


def _rft_control(config, start: str, control_dir: str) -> str:
  """Collects the RL budget of verified samples (once), then SFT on them; the export dir
  (the start itself when no sample was right: there is nothing to fine-tune on)."""
  samples = os.path.join(control_dir, "samples.jsonl")
  if not os.path.exists(samples):
    stats = rejection.collect(config, start, samples + ".partial")
    os.replace(samples + ".partial", samples)
    with open(samples + ".stats.json", "w", encoding="utf-8") as f:
      json.dump(dict(stats, path=samples), f, indent=2)
    logging.info("RFT control: %d of %d samples correct, %d kept", stats["correct"],
                 stats["samples"], stats["kept"])
  with open(samples, encoding="utf-8") as f:
    if not any(line.strip() for line in f):  # fine-tuning on nothing leaves the start as it is
      logging.warning("RFT control: no verified sample in %s; the control arm is the start",
                      samples)
      return start
  sft_dir = os.path.join(control_dir, "sft")
  sft_trainer.train(control_config(config, samples), sft_dir)
  return os.path.join(sft_dir, sft_trainer.EXPORT_DIR)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs every stage under `workdir`; returns the evals, report paths, tables and times."""
  config = ml_collections.ConfigDict(config.to_dict())
  check_stages(config)
  write_config(workdir, config)
  start = pretrained_path(config)
  tokenizer = batching.configure_prompts(load_tokenizer(config.tokenizer.path), config.tokenizer)
  rl = rl_config_lib.load(config.rl)
  mixture = TaskMixture(from_section(TaskConfig, config.tasks, "tasks"), int(config.seed))
  before = pipeline_stages.heldout_eval(config, start, tokenizer, mixture, rl, "pretrained")
  rl_dir = os.path.join(workdir, "rl")
  after, rl_s = pipeline_stages.rl_arm(config, config, tokenizer, mixture, rl, rl_dir)
  control_dir = os.path.join(workdir, "control")
  control_export, control_s = pipeline_stages.timed(control_dir, _rft_control, config, start, control_dir)
  control = pipeline_stages.heldout_eval(config, control_export, tokenizer, mixture, rl,
                                         "RFT control")
  domains = ", ".join(config.tasks.domains)
  return pipeline_stages.report(
      workdir, rl_dir, {"before": before, "after": after, "control": control}, None,
      {"rl": rl_s, "control": control_s},
      f"rl_post demo: {os.path.basename(start)} -> {rl.algorithm.upper()} on {domains}",
      ARM_NAMES)
