"""A checkpoint read straight into a quantized frozen base, one projection layer at a time.

  frozen = quant_load.place_quantized(config, source, "nf4", 64, mesh=mesh, rules=rules)

`quant.quantize_base` takes float params, so a loader that fed it would
hold every block projection in float first (for SmolLM2-135M about 425 MB
of float32 beside the base made from it). Here each layer of each block
projection is read from `source` on its own (HF-named tensors: a
`gguf.GGUFSource` or a `safetensors_io.SafetensorsDir`), cast to the params
dtype and quantized; only its quantized arrays are kept, stacked over the
layers on the host. The float values alive at a time are one layer of one
projection. Embeddings, norms and the head are placed as `hf.place_params`
places them: float, in their shardings.

The result is `quant.quantize_base(hf.place_params(config, source), ...)`
bit for bit (the same quantizer, per layer, on the same values); the
projections come back as host (numpy) arrays, which
`rl_post.training.state.create_train_state` places in their shardings.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.models import hf, hf_mapping, quant, quant4
from rl_post.models.config import ModelConfig
from rl_post.models.transformer import abstract_params


@functools.partial(jax.jit, static_argnums=(1, 2))
def _quantize_layer(w_KxN, base_quant: str, block_size: int):
  """One layer's projection [K, N] quantized: (codes, scales, offsets or None)."""
  if base_quant == "int8":
    q_KxN, scale_N = quant.quantize_KxN(w_KxN)
    return q_KxN, scale_N, None
  return quant4.quantize_KxN(w_KxN, base_quant, block_size)


def _layer(spec, source, layer: int, dtype, base_quant: str, block_size: int):
  """(codes, scales, offsets or None) of one layer of one projection, as numpy
  arrays shaped like that layer's slice of `quant.quantize_base`'s."""
  w = np.asarray(spec.to_ours(source.get(spec.name(layer))), dtype)  # [*in, *out]
  axis = quant.packed_axis(spec.path[-1], w.ndim)  # the last input dim
  out_shape = w.shape[axis + 1:]
  codes, scale, offset = jax.device_get(_quantize_layer(
      w.reshape(-1, math.prod(out_shape)), base_quant, block_size))
  if base_quant == "int8":
    return codes.reshape(w.shape), scale.reshape(out_shape), None
  packed_shape = w.shape[:axis] + (w.shape[axis] // 2,) + out_shape
  scale_shape = w.shape[:axis] + (w.shape[axis] // block_size,) + out_shape
  return (codes.reshape(packed_shape), scale.reshape(scale_shape),
          None if offset is None else offset.reshape(scale_shape))


def place_quantized(config: ModelConfig, source, base_quant: str, block_size: int, *,
                    mesh=None, rules=None) -> dict:
  """The frozen base `quant.quantize_base` makes, read from `source` one
  projection layer at a time (see the module docstring).

  Args:
    config: the model config (shapes, and the params dtype the values are
      cast to before they are quantized).
    source: HF-named tensors, as `hf.place_params` takes them.
    base_quant, block_size: `lora.base_quant` and `lora.base_quant_block_size`.
    mesh, rules: where the float params (embeddings, norms, head) go, as in
      `hf.place_params`.
  Raises:
    ValueError: an unknown format, a block size that does not divide a
      projection, or a missing or misshapen tensor.
  """
  if base_quant not in quant.FORMATS:
    raise ValueError(f"lora.base_quant must be one of {quant.FORMATS}, got {base_quant!r}")
  if base_quant != "int8":
    quant.check_block_size(abstract_params(config), block_size)
  hf.check_tensors(config, source)
  params = hf.place_params(config, source, mesh=mesh, rules=rules,
                           skip=quant.PROJECTION_PATHS)
  dtype = np.dtype(jnp.dtype(config.param_dtype))
  scales, offsets = {}, {}
  for spec in hf_mapping.param_specs(config):
    if spec.path not in quant.PROJECTION_PATHS:
      continue
    _, module, target = spec.path
    layers = [_layer(spec, source, i, dtype, base_quant, block_size)
              for i in range(config.num_layers)]
    hf_mapping.set_path(params, spec.path, np.stack([q for q, _, _ in layers]))
    scales.setdefault(module, {})[target] = np.stack([s for _, s, _ in layers])
    if base_quant in quant4.AFFINE:
      offsets.setdefault(module, {})[target] = np.stack([o for _, _, o in layers])
  frozen = {"params": params, "scales": scales}
  if base_quant != "int8":
    frozen["codebook"] = quant4.codebook(base_quant)
  if offsets:
    frozen["offsets"] = offsets
  return frozen
