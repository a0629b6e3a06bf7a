"""The docs' worked examples of each extension run as written.

docs/envs.md (a tool and an environment domain), docs/domains.md (a task
domain) and docs/algorithms.md (an RL algorithm) each show an extension as
one module plus one config line. These tests take the code blocks out of
the markdown, write each module where its first line says (`# my_project/
count_tool.py`) under a temporary directory put on `sys.path`, load it the
way the doc says (by "module:Class" from the config; an algorithm with
`registry.register`), and run it end to end at tiny size through the
trainer. Nothing here imports a copy of the examples: a doc edit that
breaks one fails here.
"""

import ast
import os
import re
import shlex
import sys

import numpy as np
import pytest

from configs import grpo_arithmetic, grpo_episodes
from rl_post.envs import driver, protocol, trainer_rounds
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.tools import ToolLimits
from rl_post.errors import ConfigError, one_line
from rl_post.metrics.writers import read_metrics
from rl_post.rl import config as rl_config
from rl_post.rl import registry as algorithm_registry
from rl_post.rl import trainer
from rl_post.sandbox import Sandbox, SandboxConfig
from rl_post.tasks import registry as task_registry

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_MODULE_LINE = re.compile(r"# ([\w/]+)\.py\n")


def _section(doc: str, heading: str) -> str:
  """The text of `doc` from the heading line `heading` to the next heading of its level."""
  with open(os.path.join(DOCS, doc)) as f:
    text = f.read()
  level = heading.split(" ")[0]
  start = text.index(f"\n{heading}\n")
  end = re.compile(rf"^{level} ", re.M).search(text, start + len(heading) + 2)
  return text[start:end.start() if end else len(text)]


def _python_blocks(text: str) -> tuple[dict, list]:
  """({module path: source} of the blocks that open with `# path.py`, [other python blocks])."""
  modules, others = {}, []
  for lang, body in _FENCE.findall(text):
    if lang != "python":
      continue
    first = _MODULE_LINE.match(body)
    if first:
      modules[first.group(1)] = body
    else:
      others.append(body)
  return modules, others


def _config_lines(blocks: list, config) -> None:
  """Runs the docs' config-line blocks (`c.episodes.tools = (...)`) on `config`."""
  for body in blocks:
    assert body.lstrip().startswith("c."), body
    exec(body, {"c": config})  # noqa: S102 (the docs' own config lines)


def _overrides(command: str) -> dict:
  """{dotted field: value} of a documented command's `--config.a.b=v` flags."""
  out = {}
  for arg in shlex.split(command.replace("\\\n", " ")):
    if arg.startswith("--config."):
      key, value = arg[len("--config."):].split("=", 1)
      try:
        out[key] = ast.literal_eval(value)
      except (ValueError, SyntaxError):
        out[key] = value
  return out


def _set(config, dotted: str, value) -> None:
  *path, name = dotted.split(".")
  for part in path:
    config = config[part]
  config[name] = value


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
  """A directory on sys.path holding every module of the docs' worked examples.

  `my_project/...` blocks keep their path; the algorithm's block, written for
  `rl_post/rl/algorithms/`, goes in as a top-level module of the same name
  (a test must not write into the package).
  """
  root = tmp_path_factory.mktemp("outside")
  sections = [_section("envs.md", "## Adding a tool or an environment domain"),
              _section("domains.md", "## Adding a domain"),
              _section("algorithms.md", "## Adding an algorithm")]
  written = []
  for text in sections:
    for path, source in _python_blocks(text)[0].items():
      if path.startswith("rl_post/"):
        path = os.path.basename(path)
      target = root / f"{path}.py"
      target.parent.mkdir(parents=True, exist_ok=True)
      target.write_text(source)
      written.append(path.replace("/", "."))
  assert {"my_project.count_tool", "my_project.word_hunt", "my_project.reverse_word",
          "best_of_group"} <= set(written), written
  with pytest.MonkeyPatch.context() as mp:
    mp.syspath_prepend(str(root))
    yield root
  for name in list(sys.modules):
    if name in written or name == "my_project" or name.startswith("my_project."):
      del sys.modules[name]


@pytest.fixture(scope="module")
def sandbox():
  with Sandbox(SandboxConfig(num_workers=2, timeout_s=10.0)) as sb:
    yield sb


def _finite_rows(workdir, steps):
  rows = read_metrics(str(workdir))
  assert [m["step"] for m in rows] == list(range(1, steps + 1))
  for m in rows:
    assert m["guard/skipped"] == 0
    assert all(np.isfinite(v) for v in m.values() if isinstance(v, float)), m
  return rows


# docs/envs.md: a tool and an environment domain


def test_tool_and_env_domain_example_runs_oracle_episodes(outside, sandbox):
  from rl_post.envs.domains import make_domain, make_env
  from rl_post.envs.tools import make_tool
  tool = make_tool("my_project.count_tool:CountLines")
  assert tool.name == "count" and type(tool).__module__ == "my_project.count_tool"
  domain = make_domain("my_project.word_hunt:WordHunt")
  limits = ToolLimits(per_call_s=3.0, per_episode_s=10.0, max_output_chars=200)
  tasks = [domain.generate(np.random.default_rng(i), 1 + i % 3) for i in range(4)]
  envs = [make_env("my_project.word_hunt:WordHunt", limits=limits) for _ in tasks]
  assert list(envs[0].toolset) == ["count", "submit"]
  assert tool.description in envs[0].reset(tasks[0])
  metrics = EpisodeMetrics()
  # the oracle counts with the new tool, reads the number and submits it
  assert driver.run_text_episodes(envs, tasks, domain.oracle_turn, sandbox, metrics) == [1.0] * 4
  assert metrics.calls["count"] == 4 and metrics.successes["count"] == 4


def test_tool_and_env_domain_config_errors_are_the_documented_lines(outside):
  text = _section("envs.md", "## Adding a tool or an environment domain")
  lines = re.findall(r"^error: (episodes\.\w+)=('[^']*'): .*$", text, re.M)
  assert len(lines) == 2, lines
  for field, value in lines:
    name = field.split(".")[1]
    section = dict(grpo_episodes.episodes_section(), **{name: (ast.literal_eval(value),)})
    with pytest.raises(ConfigError) as e:
      trainer_rounds.load(section)
    assert f"error: {one_line(e.value)}" in text.splitlines()


def test_tool_and_env_domain_config_lines_train(outside, tmp_path):
  text = _section("envs.md", "## Adding a tool or an environment domain")
  _, config_blocks = _python_blocks(text)
  c = grpo_episodes.get_config("tiny")
  _config_lines(config_blocks, c)
  assert c.episodes.tools == ("my_project.count_tool:CountLines",)
  assert c.episodes.domains[0] == "my_project.word_hunt:WordHunt"
  c.episodes.call_vocab_copies = 16  # the random model writes whole calls more often
  c.rl.update(num_steps=1, checkpoint_every=1)
  # the call_vocab tokenizer gives the new tool's example call a token of its own
  from rl_post.envs.tools import make_tool
  example = make_tool("my_project.count_tool:CountLines").examples[0]
  tokenizer = trainer_rounds.tokenizer_for(trainer_rounds.load(c.episodes))
  assert protocol.format_call("count", example) in tokenizer.calls
  trainer.train(c, str(tmp_path))
  rows = _finite_rows(tmp_path, 1)
  assert "pass_rate/word_hunt" in rows[0], rows[0].keys()


# docs/domains.md: a task domain


def test_task_domain_example_demonstrates_and_refuses_as_documented(outside):
  text = _section("domains.md", "## Adding a domain")
  spec = "my_project.reverse_word:ReverseWord"
  domain = task_registry.make_domain(spec)
  assert type(domain).__module__ == "my_project.reverse_word"
  for answer_format in domain.answer_formats:  # its demonstration scores 1 in every format
    d = task_registry.make_domain(spec, {"answer_format": answer_format})
    for level in d.difficulty_levels:
      task = d.generate(np.random.default_rng(level), level)
      assert d.verify(task, d.demonstration(task)).score == 1.0, (answer_format, task)
      assert d.verify(task, "<answer>" * 10_000).score == 0.0
  refusal = re.search(r"\(`(answer_format must be one of .*?)`\)", text, re.S).group(1)
  with pytest.raises(ValueError) as e:
    task_registry.make_domain(spec, {"answer_format": "final_number"})
  assert one_line(refusal) in one_line(e.value)


def test_task_domain_config_lines_train_with_reward_workers(outside, tokenizer_path, tmp_path):
  _, config_blocks = _python_blocks(_section("domains.md", "## Adding a domain"))
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  _config_lines(config_blocks, c)
  assert c.tasks.domains[0] == "my_project.reverse_word:ReverseWord"
  # grpo_arithmetic's 24-token prompt budget fits arithmetic; the arithmetic
  # tokenizer spells this domain's prompts out in 50-60 pieces
  c.rl.update(num_steps=1, checkpoint_every=1, max_prompt_len=96)
  c.rewards.num_workers = 1  # the worker process imports the domain by its spec too
  trainer.train(c, str(tmp_path))
  rows = _finite_rows(tmp_path, 1)
  assert any("my_project.reverse_word:ReverseWord" in k for k in rows[0]), rows[0].keys()


# docs/algorithms.md: an algorithm


def test_algorithm_example_registers_and_trains(outside, tokenizer_path, tmp_path, monkeypatch):
  text = _section("algorithms.md", "## Adding an algorithm")
  import best_of_group  # the doc's module, from outside the package
  monkeypatch.setattr(algorithm_registry, "_REGISTRY", dict(algorithm_registry._REGISTRY))
  algorithm_registry.register(best_of_group.BEST_OF_GROUP)
  # the documented validation message
  refusal = re.search(r"\(`(rl\.best_of_group\.bonus must be .*?)`\)", text).group(1)
  section = grpo_arithmetic.get_config("tiny").rl.to_dict()
  section["best_of_group"] = dict(bonus=0.0)
  with pytest.raises(ValueError, match=re.escape(refusal)):
    rl_config.load(section)
  # the documented command's --config overrides, on the same tiny config
  command = next(b for b in re.findall(r"^    (python experiments/train_rl\.py.*?)\n\n",
                                       text, re.M | re.S) if "best_of_group" in b)
  assert "--config=configs/grpo_arithmetic.py:tiny" in command
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  for key, value in _overrides(command).items():
    _set(c, key, value)
  assert c.rl.algorithm == "best_of_group" and c.rl.best_of_group.bonus == 2.0
  c.rl.update(num_steps=1, checkpoint_every=1)
  c.rewards.num_workers = 0
  trainer.train(c, str(tmp_path))
  _finite_rows(tmp_path, 1)
