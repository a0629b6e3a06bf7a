"""Trainers start from `config.pretrained` (a HF dir or GGUF file)."""

import dataclasses

import jax
import numpy as np
import pytest

from configs import sft_arithmetic
from rl_post import models
from rl_post.models import hf
from rl_post.training import run


@pytest.fixture
def checkpoint(tmp_path, tokenizer, make_random_params):
  config = models.ModelConfig(vocab_size=tokenizer.vocab_size, num_layers=2, embed_dim=32,
                              num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=48,
                              qkv_bias=True, rope_theta=1e6)
  params = make_random_params(config, seed=3)
  return config, params, hf.save(str(tmp_path / "ckpt"), config, params)


def _config(tokenizer_path, path, **model):
  config = sft_arithmetic.get_config("tiny")
  config.tokenizer.path = tokenizer_path
  config.pretrained = dict(path=path, dtype="float32")
  config.model = dict(model)
  return config


def test_run_starts_from_pretrained(tmp_path, tokenizer_path, checkpoint):
  stored_config, stored_params, path = checkpoint
  ctx = run.setup_run(_config(tokenizer_path, path, attention_impl="xla"), str(tmp_path / "w"))
  assert ctx.model_config == dataclasses.replace(stored_config, attention_impl="xla")
  params = run.pretrained_params(ctx)
  jax.tree.map(np.testing.assert_array_equal, params, stored_params)


def test_pretrained_shape_override_is_named(tmp_path, tokenizer_path, checkpoint):
  ctx = run.setup_run(_config(tokenizer_path, checkpoint[2], num_layers=3), str(tmp_path / "w"))
  with pytest.raises(ValueError, match=r"differs from config.model in \{'num_layers': \(2, 3\)\}"):
    run.pretrained_params(ctx)


def test_missing_pretrained_path_is_named(tmp_path, tokenizer_path):
  with pytest.raises(FileNotFoundError, match="neither a .gguf file nor a directory"):
    run.setup_run(_config(tokenizer_path, str(tmp_path / "nope")), str(tmp_path / "w"))
