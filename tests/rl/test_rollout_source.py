"""The rollout-source seam: the config picks one source, the trainer never asks its kind."""

import ast
import pathlib
import re

import pytest

import fake_source
from configs import grpo_episodes
from rl_post.errors import ConfigError
from rl_post.metrics.writers import read_metrics
from rl_post.rl import rollout_source, trainer
from rl_post.rl.episode_source import EpisodeSource
from rl_post.rl.single_turn_source import SingleTurnSource
from tiny_grpo import tiny_digit_config

RL = pathlib.Path(trainer.__file__).parent
DOCS = RL.parent.parent / "docs"


def test_a_source_from_outside_the_package_trains_steps(tokenizer_path, tmp_path):
  config = tiny_digit_config(tokenizer_path, num_steps=2,
                             rollout_source="fake_source:FixedTasksSource")
  fake_source.EVENTS.clear()
  result = trainer.train(config, str(tmp_path))
  # started after the restore, one round per step (no filtering), closed at the end
  assert fake_source.EVENTS == [("start",), ("launch", 0, 0), ("launch", 1, 0), ("close",)]
  rows = read_metrics(str(tmp_path))
  assert [m["step"] for m in rows] == [1, 2]
  for m in rows:
    assert m["fixed_tasks/distinct_prompts"] <= config.rl.batch_size  # the source's metrics
    assert m["guard/skipped"] == 0 and "loss" in m and 0 <= m["reward/mean"] <= 1
  assert not result["preempted"]


def _doc_example() -> str:
  """The `# my_project/fixed_tasks.py` block of docs/algorithms.md's rollout-source section."""
  text = (DOCS / "algorithms.md").read_text()
  start = text.index("\n### A new rollout source (`rl.rollout_source`)\n")
  end = re.compile(r"^##+ ", re.M).search(text, start + 2)
  section = text[start:end.start() if end else len(text)]
  blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
  assert len(blocks) == 1 and blocks[0].startswith("# my_project/fixed_tasks.py\n")
  return blocks[0]


def test_the_docs_example_source_trains_a_step(tokenizer_path, tmp_path, monkeypatch):
  # written under a name of its own: other docs tests put a `my_project` package on sys.path
  (tmp_path / "doc_fixed_tasks.py").write_text(_doc_example())
  monkeypatch.syspath_prepend(str(tmp_path))
  config = tiny_digit_config(tokenizer_path, num_steps=1,
                             rollout_source="doc_fixed_tasks:FixedTasksSource")
  trainer.train(config, str(tmp_path / "run"))
  [row] = read_metrics(str(tmp_path / "run"))
  assert row["step"] == 1 and row["fixed_tasks/distinct_prompts"] >= 1 and "loss" in row


def test_the_config_picks_the_source(tokenizer_path):
  digits = tiny_digit_config(tokenizer_path)
  episodes = grpo_episodes.get_config("tiny")
  assert rollout_source.source_class("", digits) is SingleTurnSource
  assert rollout_source.source_class("", episodes) is EpisodeSource
  assert rollout_source.source_class("single_turn", digits) is SingleTurnSource
  assert rollout_source.source_class("episodes", episodes) is EpisodeSource
  assert (rollout_source.source_class("fake_source:FixedTasksSource", digits)
          is fake_source.FixedTasksSource)
  for name, match in (("multi_turn", r"rl.rollout_source='multi_turn': must be one of"),
                      ("fake_source:Missing", "does not load"),
                      ("no_such_module:Source", "does not load"),
                      ("fake_source:NotASource", "is not a RolloutSource subclass")):
    with pytest.raises(ConfigError, match=match):
      rollout_source.source_class(name, digits)
  with pytest.raises(ConfigError, match="leaves the enabled episodes section unused"):
    rollout_source.source_class("single_turn", episodes)


def test_episodes_named_without_the_episodes_section_is_refused(tokenizer_path, tmp_path):
  config = tiny_digit_config(tokenizer_path, num_steps=1, rollout_source="episodes")
  with pytest.raises(ConfigError, match="rl.rollout_source='episodes': needs the episodes"):
    trainer.train(config, str(tmp_path))


def _imports(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      names.update([node.module] + [f"{node.module}.{a.name}" for a in node.names])
  return names


def test_the_trainer_and_its_components_know_no_source_kind():
  for name in ("trainer.py", "components.py"):
    found = {m for m in _imports(RL / name)
             if m.startswith(("rl_post.envs", "rl_post.eval", "rl_post.sampling.sampler.generate",
                              "rl_post.rewards.pool", "rl_post.rl.episode_source",
                              "rl_post.rl.single_turn_source"))}
    assert found == set(), name
    assert ".episodes" not in (RL / name).read_text(), name
