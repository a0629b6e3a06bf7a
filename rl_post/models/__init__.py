"""Flax NNX decoder-only transformers used in functional form."""

from rl_post.models.config import ModelConfig, RopeScaling
from rl_post.models.transformer import (abstract_params, apply, apply_layers_with_cache,
                                        apply_with_cache, decode_weights, head_matrix,
                                        init_cache, init_layer_caches, init_params,
                                        param_logical_axes, unstack_blocks)

__all__ = ["ModelConfig", "RopeScaling", "abstract_params", "apply", "apply_layers_with_cache",
           "apply_with_cache", "decode_weights", "head_matrix", "init_cache",
           "init_layer_caches", "init_params", "param_logical_axes", "unstack_blocks"]
