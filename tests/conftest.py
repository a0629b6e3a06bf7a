"""Shared fixtures: a small trained tokenizer and tiny model configs."""

import os
import sys

import jax
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # configs/ imports `configs.base`
  sys.path.insert(0, ROOT)

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory):
  from configs import base
  from rl_post.data import build_tokenizer
  config = base.get_base()
  config.tokenizer.path = str(tmp_path_factory.mktemp("tok") / "arith.model")
  config.tokenizer.corpus_examples = 2000
  return build_tokenizer.build(config).model_path


@pytest.fixture(scope="session")
def tokenizer(tokenizer_path):
  from rl_post.data.tokenizer import SentencePieceTokenizer
  return SentencePieceTokenizer(tokenizer_path)


@pytest.fixture
def tiny_model_config():
  from rl_post.models import ModelConfig
  return ModelConfig(vocab_size=97, num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2,
                     head_dim=8, mlp_dim=64)
