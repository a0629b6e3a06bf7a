"""Each config section is parsed once, at the entry point, and passed down typed.

An RL run, the RL components of an episodes run and an SFT run count
every `config_sections.from_section` call by section name (`episodes.load`
parses through it too) and every `run_sections` call: a layer that parsed a
section again from the raw config would count it twice.
"""

import collections
import sys

from configs import grpo_episodes, sft_arithmetic
from rl_post import config_sections
from rl_post.envs import trainer_rounds  # noqa: F401 (imported before the patch)
from rl_post.rl import components as components_lib
from rl_post.rl import episode_source, single_turn_source, trainer  # noqa: F401 (as above)
from rl_post.sft import trainer as sft_trainer
from rl_post.training import run as run_lib
from tiny_grpo import tiny_digit_config

# what the RL components parse, whichever the source
RL_SECTIONS = {"rl", "tasks", "optimizer", "rewards", "filtering", "guard", "faults",
               "episodes", "distributed", "<run sections>"}


def _count_parses(monkeypatch) -> collections.Counter:
  """Counts, from now on, each section parsed (by name) and each `run_sections` call."""
  counts = collections.Counter()
  real = config_sections.from_section

  def counting(cls, section, name):
    counts[name] += 1
    return real(cls, section, name)

  for module in list(sys.modules.values()):
    if (getattr(module, "__name__", "").startswith("rl_post.")
        and getattr(module, "from_section", None) is real):
      monkeypatch.setattr(module, "from_section", counting)
  real_run = run_lib.run_sections

  def counting_run(config):
    counts["<run sections>"] += 1
    return real_run(config)

  for module in (run_lib, components_lib, sft_trainer):
    monkeypatch.setattr(module, "run_sections", counting_run)
  return counts


def _parsed_more_than_once(counts) -> dict:
  return {name: n for name, n in counts.items() if n != 1}


def test_an_rl_run_parses_each_section_once(tokenizer_path, tmp_path, monkeypatch):
  config = tiny_digit_config(tokenizer_path, num_steps=1)
  counts = _count_parses(monkeypatch)
  trainer.train(config, str(tmp_path))  # the components, the loop, a checkpoint
  assert RL_SECTIONS <= set(counts), counts
  assert _parsed_more_than_once(counts) == {}, counts


def test_building_episodes_components_parses_each_section_once(tmp_path, monkeypatch):
  config = grpo_episodes.get_config("tiny")
  counts = _count_parses(monkeypatch)
  c = run_lib.scoped_run(components_lib.RLComponents)(config, str(tmp_path))
  assert type(c.source).__name__ == "EpisodeSource" and c.episodes is not None
  assert c.run.seed == config.seed and c.ctx.sections is c.run
  assert RL_SECTIONS <= set(counts), counts
  assert _parsed_more_than_once(counts) == {}, counts


def test_an_sft_run_parses_each_section_once(tokenizer_path, tmp_path, monkeypatch):
  config = sft_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.sft.update(num_steps=1, checkpoint_every=1)
  counts = _count_parses(monkeypatch)
  sft_trainer.train(config, str(tmp_path))
  assert {"sft", "tasks", "optimizer", "guard", "faults", "episodes", "distributed",
          "<run sections>"} <= set(counts), counts
  assert _parsed_more_than_once(counts) == {}, counts
