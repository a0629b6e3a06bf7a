"""Mixed precision: bf16 compute over f32 master weights.

The model already separates the two (rl_post/models/config.py):
`param_dtype` is how params are stored, and so what the optimizer state
mirrors; `dtype` is what every layer casts params and activations to before
its matmuls. Mixed precision is therefore a model config with
`dtype="bfloat16"` and `param_dtype="float32"`; `rl.compute_dtype` sets the
first for an RL run without touching `config.model` (so a model exported
by an f32 SFT run still loads with `rl.init_from`). Log-softmax, entropy
and the loss stay f32: the chunked log-prob matmul accumulates in f32
(`preferred_element_type`), the sampler's `scaled_log_softmax` upcasts, and
gradients arrive at the f32 params through the casts.
"""

import dataclasses

import jax
import numpy as np

from rl_post.models.config import ModelConfig


def compute_config(model_config: ModelConfig, compute_dtype: str) -> ModelConfig:
  """`model_config` computing in `compute_dtype` ("" = unchanged).

  Raises:
    ValueError: bf16 compute over bf16 params (no f32 master weights), or
      an unknown dtype.
  """
  if compute_dtype == "":
    return model_config
  if compute_dtype not in ("float32", "bfloat16"):
    raise ValueError(f"rl.compute_dtype must be \"\", \"float32\" or \"bfloat16\", "
                     f"got {compute_dtype!r}")
  if compute_dtype == "bfloat16" and model_config.param_dtype != "float32":
    raise ValueError("rl.compute_dtype=bfloat16 needs f32 master weights: set "
                     f"model.param_dtype='float32' (got {model_config.param_dtype!r})")
  return dataclasses.replace(model_config, dtype=compute_dtype)


def floating_dtypes(tree) -> set[str]:
  """Names of the floating dtypes of the array leaves of `tree` (e.g. {"float32"})."""
  return {np.dtype(x.dtype).name for x in jax.tree.leaves(tree)
          if hasattr(x, "dtype") and np.issubdtype(np.dtype(x.dtype), np.floating)}
