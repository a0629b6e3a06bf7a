"""Helpers for the checkpoint tests."""

import os

import numpy as np
import pytest

# transformers must never try the hub from tests
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def random_params(config, seed=0, scale=0.1):
  """Random float32 params built with numpy: no per-leaf jit compiles (init_params
  compiles one program per parameter, which costs tens of seconds on 2 cores)."""
  from rl_post import models
  rng = np.random.default_rng(seed)
  return {k: _fill(v, rng, scale) for k, v in models.abstract_params(config).items()}


def _fill(tree, rng, scale):
  if isinstance(tree, dict):
    return {k: _fill(v, rng, scale) for k, v in tree.items()}
  return (scale * rng.standard_normal(tree.shape)).astype(np.float32)


@pytest.fixture
def make_random_params():
  return random_params
