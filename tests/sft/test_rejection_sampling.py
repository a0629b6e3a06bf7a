"""Rejection-sampling fine-tuning: the JSONL dataset SFT reads, its batches, the
collection of verified samples, and SFT trained on such a set."""

import json

import numpy as np
import pytest

from configs import grpo_arithmetic, sft_arithmetic
from rl_post.errors import ConfigError
from rl_post.eval import completion
from rl_post.metrics.writers import read_metrics
from rl_post.sft import dataset, rejection
from rl_post.sft import trainer as sft_trainer


def _write(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  return str(path)


def test_examples_load_and_bad_files_name_the_line(tmp_path):
  good = _write(tmp_path / "good.jsonl", [{"prompt": "p1", "response": "r1", "domain": "x"},
                                          {"prompt": "p2", "response": "r2"}])
  assert dataset.load_examples(good) == [("p1", "r1"), ("p2", "r2")]
  (tmp_path / "bad.jsonl").write_text('{"prompt": "p", "response": "r"}\nnot json\n')
  with pytest.raises(ConfigError, match="sft.dataset=.*line 2 is not JSON"):
    dataset.load_examples(str(tmp_path / "bad.jsonl"))
  _write(tmp_path / "field.jsonl", [{"prompt": "p", "response": 3}])
  with pytest.raises(ConfigError, match="line 1 needs string 'prompt' and 'response'"):
    dataset.load_examples(str(tmp_path / "field.jsonl"))
  (tmp_path / "empty.jsonl").write_text("\n")
  with pytest.raises(ConfigError, match="holds no examples"):
    dataset.load_examples(str(tmp_path / "empty.jsonl"))
  with pytest.raises(ConfigError, match="cannot be read"):
    dataset.load_examples(str(tmp_path / "missing.jsonl"))


def test_batches_visit_every_example_once_per_epoch_and_repeat_for_a_seed():
  examples = [(f"p{i}", f"r{i}") for i in range(10)]
  prompts = [p for step in range(5) for p in dataset.example_batch(examples, step, 4, seed=1)[0]]
  assert sorted(prompts[:10]) == sorted(p for p, _ in examples)  # epoch 0
  assert sorted(prompts[10:20]) == sorted(p for p, _ in examples)  # epoch 1
  assert prompts[:10] != prompts[10:20]  # a new order per epoch
  assert dataset.example_batch(examples, 3, 4, seed=1) == dataset.example_batch(examples, 3, 4, 1)
  assert dataset.example_batch(examples, 0, 4, seed=2) != dataset.example_batch(examples, 0, 4, 1)


def test_collect_keeps_only_verified_distinct_responses(tokenizer_path, tmp_path, monkeypatch):
  """Generation replaced by a fixed responder (the real sampler runs in the CLI test
  below): correct answers for even prompts, each twice; wrong ones for odd prompts."""
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.rl.update(num_steps=2, batch_size=2, num_generations=3)
  config.tasks.domain_options.arithmetic.answer_format = "final_number"
  real = completion.scored_batches

  def responder(model_config, params, tokenizer, tasks, *, reward_pool, **kwargs):
    texts = [f"It is {t.target}." if i % 3 != 2 else "no idea" for i, t in enumerate(tasks)]
    yield 0, list(tasks), texts, None, reward_pool.score(list(tasks), texts)

  monkeypatch.setattr(completion, "scored_batches", responder)
  export = _tiny_export(config, tmp_path)
  stats = rejection.collect(config, export, str(tmp_path / "rft" / "samples.jsonl"))
  monkeypatch.setattr(completion, "scored_batches", real)
  assert stats["samples"] == 2 * 2 * 3 and stats["correct"] == 8
  records = [json.loads(line) for line in open(stats["path"])]
  assert stats["kept"] == len(records) == 4  # two copies of each right answer: one kept
  for r in records:
    assert r["domain"] == "arithmetic" and r["response"].startswith("It is ")
    assert r["prompt"].endswith("End your response with the answer as a number.")


def test_collect_command_samples_the_rl_budget(tokenizer_path, tmp_path):
  """experiments/rft_collect.py with the real sampler on a tiny random model."""
  import os
  import subprocess
  import sys
  config = grpo_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  export = _tiny_export(config, tmp_path)
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  out = tmp_path / "samples.jsonl"
  done = subprocess.run(
      [sys.executable, "experiments/rft_collect.py", "--config=configs/grpo_arithmetic.py:tiny",
       f"--config.tokenizer.path={tokenizer_path}", "--config.rl.num_steps=2",
       "--config.rl.batch_size=2", "--config.rl.num_generations=2", f"--checkpoint={export}",
       f"--out={out}"], cwd=root, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  stats = json.loads((tmp_path / "samples.jsonl.stats.json").read_text())
  assert stats["samples"] == 2 * 2 * 2 and stats["per_domain"]["arithmetic"]["samples"] == 8
  assert stats["kept"] == len(out.read_text().splitlines()) <= stats["correct"]
  assert "of 8 samples correct" in done.stdout


def _tiny_export(config, tmp_path):
  import jax
  from rl_post.checkpoint.params import save_params
  from rl_post.config_sections import from_section
  from rl_post.data.tokenizer import SentencePieceTokenizer
  from rl_post.parallel import mesh as mesh_lib
  from rl_post.training import state as state_lib
  from rl_post.training.optimizer import OptimizerConfig, make_optimizer
  from rl_post.training.run import model_config_from
  model_config = model_config_from(config, SentencePieceTokenizer(config.tokenizer.path))
  optimizer = make_optimizer(from_section(OptimizerConfig, config.optimizer, "optimizer"))
  state = state_lib.create_train_state(model_config, optimizer,
                                       mesh_lib.make_mesh(dict(config.mesh)),
                                       tuple(tuple(r) for r in config.sharding_rules),
                                       jax.random.key(0))
  return save_params(str(tmp_path / "export"), model_config, state.params)


def test_sft_trains_on_a_dataset_instead_of_demonstrations(tokenizer_path, tmp_path):
  data = _write(tmp_path / "rft.jsonl", [{"prompt": f"What is {i}+1?", "response": f"{i + 1}"}
                                         for i in range(6)])
  c = sft_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.sft.update(num_steps=3, batch_size=4, checkpoint_every=3, dataset=data)
  sft_trainer.train(c, str(tmp_path / "run"))
  rows = read_metrics(str(tmp_path / "run"))
  assert [r["step"] for r in rows] == [1, 2, 3] and all(np.isfinite(r["loss"]) for r in rows)
  # "i+1" plus EOS: 2-3 response tokens per example, far fewer than arithmetic's
  # column-work demonstrations
  assert all(r["response_tokens"] <= 4 * 4 for r in rows)
  c.sft.dataset = str(tmp_path / "missing.jsonl")
  with pytest.raises(ConfigError, match="sft.dataset=.*cannot be read"):
    sft_trainer.train(c, str(tmp_path / "run2"))
