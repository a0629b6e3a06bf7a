"""`rl.algorithm = "module:ATTR"`: an algorithm from outside the package, chosen by config."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import custom_algorithm
from rl_post.metrics.writers import read_metrics
from rl_post.rl import config as rl_config
from rl_post.rl import registry
from rl_post.rl import trainer
from tiny_grpo import tiny_digit_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
  """Entries registered here stay here (the docs' test registers a `best_of_group` too)."""
  monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
  monkeypatch.setattr(registry, "_IMPORTED", dict(registry._IMPORTED))


def test_an_imported_algorithm_is_registered_with_its_section():
  rl = rl_config.load(dict(algorithm="custom_algorithm:BEST_OF_GROUP",
                           custom_best_of_group=dict(bonus=2.0)))
  assert rl.entry is custom_algorithm.BEST_OF_GROUP and rl.algo.bonus == 2.0
  assert registry.get("custom_best_of_group") is custom_algorithm.BEST_OF_GROUP
  assert "custom_best_of_group" in rl_config.section_defaults()
  with pytest.raises(ValueError, match="rl.custom_best_of_group.bonus must be > 0"):
    rl_config.load(dict(algorithm="custom_algorithm:BEST_OF_GROUP",
                        custom_best_of_group=dict(bonus=0.0)))
  # a callable that returns one; no sub-section in the config: its defaults
  rl = rl_config.load(dict(algorithm="custom_algorithm:make_best_of_two"))
  assert rl.entry.name == "custom_best_of_two" and rl.algo.bonus == 1.0
  assert rl_config.load(dict(algorithm="custom_algorithm:make_best_of_two")).entry is rl.entry


@pytest.mark.parametrize("spec,expected", [
    ("no_such_module:ALG", "rl.algorithm: cannot import algorithm 'no_such_module:ALG': "
                           "No module named 'no_such_module'"),
    ("custom_algorithm:NOPE", "rl.algorithm: cannot import algorithm 'custom_algorithm:NOPE'"),
    ("custom_algorithm:NOT_AN_ALGORITHM", "rl.algorithm: 'custom_algorithm:NOT_AN_ALGORITHM' "
                                          "is a int, not an Algorithm"),
    ("custom_algorithm:NAMED_LIKE_GRPO", "is named 'grpo', the name of another registered"),
    ("custom_algorithm:broken_factory", "'custom_algorithm:broken_factory' raised "
                                        "RuntimeError: no GPU here"),
])
def test_a_bad_path_is_one_clear_line(spec, expected):
  with pytest.raises(ValueError) as info:
    rl_config.load(dict(algorithm=spec))
  assert expected in str(info.value) and "\n" not in str(info.value)
  assert str(info.value).startswith("rl.algorithm")
  assert registry.get("grpo").name == "grpo"  # nothing replaced


def test_an_imported_algorithm_trains_a_step(tokenizer_path, tmp_path):
  c = tiny_digit_config(tokenizer_path, num_steps=1)
  assert rl_config.add_algorithm(c.rl, "custom_algorithm:BEST_OF_GROUP") == "custom_best_of_group"
  c.rl.custom_best_of_group.bonus = 2.0  # what --config.rl.custom_best_of_group.bonus=2 sets
  trainer.train(c, str(tmp_path))
  (row,) = read_metrics(str(tmp_path))
  assert row["step"] == 1 and np.isfinite(row["loss"])


def test_the_cli_reports_a_bad_path_on_one_line(tokenizer_path, tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, "experiments/train_rl.py", "--config=configs/grpo_arithmetic.py:tiny",
       f"--config.tokenizer.path={tokenizer_path}", f"--workdir={tmp_path / 'run'}",
       "--config.rl.algorithm=no_such_module:ALG"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
  assert errors == ["error: rl.algorithm='no_such_module:ALG': cannot import algorithm "
                    "'no_such_module:ALG': No module named 'no_such_module'"], proc.stderr


def _doc_blocks() -> dict:
  """{first line path: source} of docs/algorithms.md's python blocks."""
  with open(os.path.join(ROOT, "docs", "algorithms.md")) as f:
    text = f.read()
  blocks = re.findall(r"^```python\n# ([\w/]+\.py)\n(.*?)^```", text, re.M | re.S)
  return {path: f"# {path}\n{body}" for path, body in blocks}


def test_the_docs_example_loads_by_path_from_its_config_file(tmp_path, monkeypatch):
  blocks = _doc_blocks()
  (tmp_path / "my_project").mkdir()
  (tmp_path / "my_project" / "best_of_group.py").write_text(
      blocks["rl_post/rl/algorithms/best_of_group.py"])
  (tmp_path / "my_project" / "best_of_group_config.py").write_text(
      blocks["my_project/best_of_group_config.py"])
  monkeypatch.syspath_prepend(str(tmp_path))
  try:
    from my_project import best_of_group_config
    c = best_of_group_config.get_config("tiny")
    assert c.rl.algorithm == "my_project.best_of_group:BEST_OF_GROUP"
    c.rl.best_of_group.bonus = 3.0  # the documented override
    rl = rl_config.load(c.rl)
    assert rl.entry.name == "best_of_group" and rl.algo.bonus == 3.0
  finally:
    for name in [n for n in sys.modules if n == "my_project" or n.startswith("my_project.")]:
      del sys.modules[name]
