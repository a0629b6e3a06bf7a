"""Flax NNX decoder-only transformers used in functional form."""

from rl_post.models.config import ModelConfig, RopeScaling
from rl_post.models.transformer import (abstract_params, apply, apply_with_cache,
                                        init_cache, init_params, param_logical_axes)

__all__ = ["ModelConfig", "RopeScaling", "abstract_params", "apply", "apply_with_cache",
           "init_cache", "init_params", "param_logical_axes"]
