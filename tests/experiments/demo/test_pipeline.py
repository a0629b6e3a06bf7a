"""The demo pipeline end to end at toy size: every stage and its outputs."""

import json
import os

import pytest

from configs import demo
from experiments.demo import pipeline
from rl_post.config_sections import from_section
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.errors import ConfigError


def _mixture(config) -> TaskMixture:
  return TaskMixture(from_section(TaskConfig, config.tasks, "tasks"), 0)


def test_tiny_pipeline_writes_report_and_resumable_stages(tmp_path):
  result = pipeline.run(demo.get_config("tiny"), str(tmp_path))
  report = tmp_path / "report"
  for name in ("summary.md", "summary.json", "reward.png", "pass_rate.png"):
    assert (report / name).stat().st_size > 0, name
  summary = json.load(open(report / "summary.json"))
  assert set(summary["evals"]) == {"before", "after", "control", "before_sampled",
                                   "after_sampled", "control_sampled"}
  n = demo.get_config("tiny").tasks.heldout_size
  assert summary["before_vs_after"]["n"] == n
  tables = summary["demo"]
  # Every configured (domain, level) is in the held-out table, marked by its demonstrations.
  cells = {(c["domain"], c["level"]): c["demonstrations"] for c in tables["cells"]}
  for domain, levels in demo.LEVELS.items():
    for level in levels:
      if (domain, level) in cells:
        assert cells[(domain, level)] == (level in demo.DEMO_LEVELS[domain]), (domain, level)
  assert sum(c["n"] for c in tables["cells"]) == n
  assert tables["unseen"]["n"] + tables["seen"]["n"] == n
  assert set(tables["macro"]) == {"before", "after", "control"}
  assert tables["wall_s"]["rl"] > 0 and tables["wall_s"]["control"] > 0
  assert "SFT start vs RL vs SFT control" in open(report / "summary.md").read()
  for stage in ("sft", "rl", "control"):
    for name in ("config.json", "metrics.jsonl", "checkpoints"):
      assert os.path.exists(tmp_path / stage / name), (stage, name)
  # The control arm continues SFT: its metrics start after the SFT stage's last step.
  config = demo.get_config("tiny")
  with open(tmp_path / "control" / "metrics.jsonl") as f:
    steps = [json.loads(line)["step"] for line in f]
  assert steps == list(range(config.sft.num_steps + 1,
                             config.sft.num_steps + config.control.num_steps + 1))
  assert os.path.exists(tmp_path / "tokenizer" / "demo.model")
  before = result["evals"]["before"]
  assert before["correct"].shape == (n,) and len(before["domain"]) == n
  # A rerun with another model or tokenizer stops before it rebuilds the tokenizer over
  # the run's own or overwrites config.json (the SFT stage refused only after both).
  kept = {name: (tmp_path / name).read_bytes() for name in ("config.json", "tokenizer/demo.model")}
  layers = config.model.num_layers
  for field, value, change in (("model.num_layers", layers + 1,
                                f"model.num_layers: {layers} -> {layers + 1}"),
                               ("seed", 1, "seed: 0 -> 1")):
    other = demo.get_config("tiny")
    other.update_from_flattened_dict({field: value})
    with pytest.raises(ConfigError, match="holds a run of another model or tokenizer") as e:
      pipeline.run(other, str(tmp_path))
    assert e.value.field == "--workdir" and change in e.value.problem
  assert {name: (tmp_path / name).read_bytes() for name in kept} == kept


def test_demo_arithmetic_variant_keeps_only_the_arithmetic_levels():
  config = demo.get_config("arithmetic")
  mixture = _mixture(config)
  assert {(t.domain, t.difficulty) for t in mixture.heldout} == {("arithmetic", 2),
                                                                 ("arithmetic", 102)}
  assert mixture.demo_levels == {"arithmetic": (2,)}
  assert config.rl == demo.get_config().rl  # the demo's RL stage, on fewer domains
  with pytest.raises(ValueError, match="unknown variant 'big'"):
    demo.get_config("big")


def test_demo_answer_only_variant_mixes_styles_in_arithmetic_demonstrations_only():
  config = demo.get_config("answer_only")
  mixture = _mixture(config)
  tasks = mixture.sample(0, 400, stream="sft")
  styles = {}
  for task in tasks:
    text = mixture.domain_of(task).demonstration(task)
    styles.setdefault(task.domain, []).append(text.startswith("<think></think>"))
  assert 0.4 < sum(styles["arithmetic"]) / len(styles["arithmetic"]) < 0.6
  assert not any(styles["countdown"]) and not any(styles["sql"])
  plain = demo.get_config()
  assert config.rl == plain.rl and config.sft == plain.sft
