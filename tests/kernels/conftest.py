"""Kernel tests run on CPU; Pallas kernels in interpret mode."""

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def rng():
  import numpy as np
  return np.random.default_rng(0)
