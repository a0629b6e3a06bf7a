"""Learnability scan: rows from hand-made outcomes, the automatic answer format, and
a real scan of a tiny model through experiments/scan_domains.py writing its table."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import grpo_arithmetic
from rl_post.checkpoint.params import save_params
from rl_post.config_sections import from_section
from rl_post.data.tokenizer import SentencePieceTokenizer
from rl_post.errors import ConfigError
from rl_post.evaluate import scan
from rl_post.parallel import mesh as mesh_lib
from rl_post.tasks import registry
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.run import model_config_from

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_row_from_hand_made_outcomes():
  settings = scan.ScanSettings(problems=4, samples=4, ks=(1, 4), in_reach_gap=0.15)
  outcomes = {"correct": np.array([True, False, False, False]),
              "strict": np.array([False, False, False, False]),
              "response_len": np.array([2.0, 4, 6, 8]),
              "num_correct": np.array([4, 1, 0, 0]), "num_strict": np.array([2, 0, 0, 0])}
  row = scan._row("d", "final_number", 1, outcomes, 1, settings)
  assert row["greedy"] == 0.25 and row["greedy_strict"] == 0.0 and row["skipped"] == 1
  assert row["pass_at_k"] == {"1": pytest.approx(5 / 16), "4": pytest.approx(0.5)}
  assert row["pass1_strict"] == pytest.approx(2 / 16) and row["mean_response_len"] == 5.0
  assert row["in_reach"]  # pass@4 - pass@1 = 0.1875 >= 0.15
  narrower = scan.ScanSettings(problems=4, samples=4, ks=(1, 4), in_reach_gap=0.2)
  assert not scan._row("d", "final_number", 1, outcomes, 1, narrower)["in_reach"]

def test_automatic_format_follows_the_answers():
  picks = {}
  for name in ("arithmetic", "countdown", "code", "rg/word_sorting", "rg/chain_sum", "math"):
    domain = registry.make_domain(name)
    rng = np.random.default_rng(0)
    tasks = [domain.generate(rng, domain.difficulty_levels[0]) for _ in range(3)]
    picks[name] = scan.auto_format(domain, tasks)
  assert picks == {"arithmetic": "final_number", "countdown": "last_line", "code": "code_block",
                   "rg/word_sorting": "last_line", "rg/chain_sum": "final_number",
                   "math": "last_line"}


@pytest.mark.parametrize("kwargs,match", [
    (dict(ks=(1, 32)), "--ks=.*must be integers in"), (dict(levels="some"), "--levels"),
    (dict(answer_format="xml"), "--answer_format='xml'"), (dict(problems=0), "--problems=0"),
])
def test_bad_settings_name_the_flag(kwargs, match):
  with pytest.raises(ConfigError, match=match):
    scan.ScanSettings(**kwargs)


@pytest.fixture(scope="module")
def export(tokenizer_path, tmp_path_factory):
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  model_config = model_config_from(config, SentencePieceTokenizer(tokenizer_path))
  optimizer = make_optimizer(from_section(OptimizerConfig, config.optimizer, "optimizer"))
  state = state_lib.create_train_state(model_config, optimizer,
                                       mesh_lib.make_mesh(dict(config.mesh)),
                                       tuple(tuple(r) for r in config.sharding_rules),
                                       jax.random.key(3))
  return save_params(str(tmp_path_factory.mktemp("scan") / "export"), model_config, state.params)


def test_scan_of_a_tiny_model_writes_its_table(export, tokenizer_path, tmp_path):
  out = tmp_path / "scan"
  cmd = [sys.executable, "experiments/scan_domains.py", "--config=configs/grpo_arithmetic.py:tiny",
         f"--config.tokenizer.path={tokenizer_path}", f"--checkpoint={export}",
         "--domains=arithmetic,rg/chain_s*", "--levels=easiest", "--problems=3", "--samples=2",
         "--ks=1,2", "--max_new_tokens=4", "--max_prompt_len=64", f"--workdir={out}"]
  done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads((out / "scan.json").read_text())
  rows = {(r["domain"], r["level"]): r for r in result["rows"]}
  assert set(rows) == {("arithmetic", 1), ("rg/chain_sum", 1)}
  arithmetic = rows[("arithmetic", 1)]
  assert arithmetic["answer_format"] == "final_number" and arithmetic["problems"] == 3
  assert 0 <= arithmetic["pass_at_k"]["1"] <= arithmetic["pass_at_k"]["2"] <= 1
  # chain_sum's prompts are far longer than 32 tokens: skipped and counted, not truncated
  assert rows[("rg/chain_sum", 1)]["skipped"] == 3 and rows[("rg/chain_sum", 1)]["problems"] == 0
  table = (out / "scan.md").read_text()
  assert "| arithmetic | final_number | 1 | 3 |" in table and "skipped (3 prompts too long)" in table
  assert table in done.stdout and not (out / "scan.partial.json").exists()
  bad = subprocess.run(cmd[:-1] + ["--domains=nope*", f"--workdir={out}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "--domains='nope*': matches no registered domain" in bad.stderr


def test_partial_tables_grow_bucket_by_bucket(export, tokenizer_path):
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  settings = scan.ScanSettings(problems=2, samples=2, ks=(1, 2), max_new_tokens=2,
                               max_prompt_len=256, levels="easiest")
  partial = []
  result = scan.scan(config, export, ["arithmetic", "countdown"], settings,
                     on_rows=lambda r: partial.append([row["domain"] for row in r["rows"]]))
  # arithmetic's short prompts fill the first bucket, countdown's longer ones a later one
  assert partial == [["arithmetic"], ["arithmetic", "countdown"]]
  assert [r["domain"] for r in result["rows"]] == partial[-1]


def test_checkpoint_defaults_to_the_configs_pretrained_model(tmp_path):
  from rl_post import cli
  config = grpo_arithmetic.get_config("tiny")
  with pytest.raises(ConfigError, match="--checkpoint=None: is required: this config has no "
                     "pretrained.path"):
    cli.checkpoint_or_pretrained(None, config)
  assert cli.checkpoint_or_pretrained("/x", config) == "/x"
  config.pretrained = {"path": "/models/raw.gguf"}
  assert cli.checkpoint_or_pretrained(None, config) == "/models/raw.gguf"
  assert cli.checkpoint_or_pretrained("/x", config) == "/x"
