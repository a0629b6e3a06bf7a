"""The rollout-source seam: the config picks one source, the trainer never asks its kind."""

import ast
import json
import os
import pathlib
import re

import ml_collections
import pytest

import fake_source
from configs import grpo_episodes
from rl_post.checkpoint.manager import CheckpointManager
from rl_post.errors import ConfigError, MissingInputError
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


def test_the_config_picks_the_source():
  digits = rollout_source.sections(ml_collections.ConfigDict())["episodes"]  # None: no section
  episodes = rollout_source.sections(grpo_episodes.get_config("tiny"))["episodes"]
  assert digits is None and episodes.enabled
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


def _checkpointing_config(tokenizer_path, num_steps: int, source: str):
  """The tiny digit run with `source`, checkpointing every step."""
  config = tiny_digit_config(tokenizer_path, num_steps=num_steps, rollout_source=source)
  config.rl.checkpoint_every = 1
  return config


def _source_states(workdir) -> dict:
  """{step: the "source" entry of that checkpoint's extra item}."""
  manager = CheckpointManager(os.path.join(workdir, "checkpoints"))
  try:
    return {s: manager.read_extra(s).get("source") for s in manager.all_steps()}
  finally:
    manager.close()


def test_a_source_state_is_saved_with_checkpoints_and_restored_on_resume(tokenizer_path,
                                                                         tmp_path):
  config = _checkpointing_config(tokenizer_path, 2, "fake_source:CountingSource")
  fake_source.EVENTS.clear()
  trainer.train(config, str(tmp_path))
  assert _source_states(tmp_path) == {1: {"steps": 1}, 2: {"steps": 2}}
  assert ("load_state_dict", {"steps": 2}) not in fake_source.EVENTS  # a fresh start
  config.rl.num_steps = 3
  fake_source.EVENTS.clear()
  trainer.train(config, str(tmp_path))
  # restored after the checkpoint, before the source starts; the count goes on
  assert fake_source.EVENTS[:2] == [("load_state_dict", {"steps": 2}), ("start",)]
  assert [m["counting/steps"] for m in read_metrics(str(tmp_path))] == [1.0, 2.0, 3.0]
  assert _source_states(tmp_path)[3] == {"steps": 3}


def test_the_default_source_stores_an_empty_state(tokenizer_path, tmp_path):
  config = _checkpointing_config(tokenizer_path, 1, "")
  trainer.train(config, str(tmp_path))
  assert _source_states(tmp_path) == {1: {}}


def _rewrite_extra(workdir, step: int, change) -> str:
  """Rewrites the extra dict of checkpoint `step` with `change(extra)`; returns its file."""
  manager = CheckpointManager(os.path.join(workdir, "checkpoints"))
  path = manager.extra_path(step)
  manager.close()
  with open(path) as f:
    extra = json.load(f)
  with open(path, "w") as f:
    json.dump(change(extra), f)
  return path


def test_an_older_checkpoint_without_source_state_restores_with_an_empty_dict(
    tokenizer_path, tmp_path):
  config = _checkpointing_config(tokenizer_path, 1, "fake_source:CountingSource")
  trainer.train(config, str(tmp_path))
  _rewrite_extra(tmp_path, 1, lambda e: {k: v for k, v in e.items() if k != "source"})
  config.rl.num_steps = 2
  fake_source.EVENTS.clear()
  trainer.train(config, str(tmp_path))
  assert fake_source.EVENTS[0] == ("load_state_dict", {})
  assert [m["counting/steps"] for m in read_metrics(str(tmp_path))] == [1.0, 1.0]


def test_a_malformed_source_state_names_the_checkpoint_file(tokenizer_path, tmp_path):
  config = _checkpointing_config(tokenizer_path, 1, "fake_source:CountingSource")
  trainer.train(config, str(tmp_path))
  where = _rewrite_extra(tmp_path, 1, lambda e: {**e, "source": [1, 2]})
  config.rl.num_steps = 2
  with pytest.raises(MissingInputError, match=re.escape(where) + r".*not a JSON object"):
    trainer.train(config, str(tmp_path))
  _rewrite_extra(tmp_path, 1, lambda e: {**e, "source": {"steps": "many"}})
  with pytest.raises(MissingInputError, match=re.escape(where) + r".*CountingSource cannot "
                     r"load: invalid literal"):
    trainer.train(config, str(tmp_path))
