"""Low-precision rollout copies of the policy: the sampler reads them, the trainer
keeps its float32 masters.

  masters (param_dtype, trained) --policy_copy--> rollout params --generate--> rollouts

`rl.rollout_precision` picks the copy:
  float32   no copy: the sampler reads the masters with the trainer's model
            config (the default; behaviour log-probs match the trainer's).
  bfloat16  every floating leaf cast to bf16; the sampler computes in bf16.
  int8      weight-only int8: every block projection rounded to int8 with one
            scale per output channel (`rl_post.models.quant.quantize_base`),
            held dequantized in bf16; activations, embeddings, norms and the
            head in bf16. The sampler sees exactly the weights an int8
            weight-only kernel would multiply by (q * s), so its log-probs
            carry int8's rounding; the copy's storage is bf16's.

The copy is a pure function of the masters, made once per round of generation
(`copy_fn`). The sampler's log-probs then differ from the trainer's: the
trainer recomputes them in f32 (`rl_post.rl.off_policy` measures the gap and
weights the update for it).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.models import quant
from rl_post.models.config import ModelConfig

PRECISIONS = ("float32", "bfloat16", "int8")


def check_precision(precision: str) -> None:
  if precision not in PRECISIONS:
    raise ValueError(f"rollout precision must be one of {PRECISIONS}, got {precision!r}")


def sampler_config(model_config: ModelConfig, precision: str) -> ModelConfig:
  """The model config the sampler runs a `precision` copy with (compute and storage
  dtype bf16 for the low-precision copies; `model_config` itself for float32)."""
  check_precision(precision)
  if precision == "float32":
    return model_config
  return dataclasses.replace(model_config, dtype="bfloat16", param_dtype="bfloat16")


def _cast_floats(tree, dtype):
  floating = lambda x: np.issubdtype(np.dtype(x.dtype), np.floating)
  return jax.tree.map(lambda x: x.astype(dtype) if floating(x) else x, tree)


def policy_copy(params: dict, precision: str) -> dict:
  """The sampler's params for `precision` from the master params (pure; jit it).

  float32 returns `params` itself; bfloat16 casts; int8 rounds every block
  projection to int8 per output channel and back (|w - q s| <= s / 2), in bf16.
  """
  check_precision(precision)
  if precision == "float32":
    return params
  if precision == "int8":
    params = quant.dequantize_base(quant.quantize_base(params), jnp.float32)
  return _cast_floats(params, jnp.bfloat16)


def copy_fn(precision: str):
  """`params -> rollout params`: the identity for float32 (no copy), else `policy_copy`
  jitted (one device program per params layout)."""
  check_precision(precision)
  if precision == "float32":
    return lambda params: params
  return jax.jit(lambda params: policy_copy(params, precision))
