"""A GGUF file's Q4_0 / Q4_1 blocks as a 4-bit frozen base, with no float round trip.

  config, frozen = gguf_q4.load_q4_base(gguf.smollm2_gguf_path())

llama.cpp stores a linear weight as rows of its output, [N, K] with K
contiguous, cut along K into blocks of 32 values: Q4_0 blocks are
(d f16, 16 bytes of codes), value = (c - 8) d; Q4_1 blocks are (d f16, m f16,
16 bytes), value = c d + m. The 16 code bytes pair element j with element
j + 16 in one byte, the layout `rl_post.models.quant4` packs in, so a
tensor's code bytes become our packed codes by a byte transpose [N, K / 2]
-> [K / 2, N], its d (and m) our per-block scales (and offsets) [K / 32, N],
both widened to float32 exactly. llama.cpp's q/k row permutation is undone
on the rows of the bytes and scales (`gguf._unpermute`).

All Q4_0: the base is an "int4" one (levels c - 8, block 32), the same tree
as `quant.quantize_base(params, "int4", 32)`. Any Q4_1: a "q4_1" one
(levels c, offsets for every projection; a Q4_0 block's offset is -8 d,
exact), the tree of `quant.quantize_base(params, "q4_1", 32)`.
Embeddings, norms and the head are dequantized to float like a plain load:
a quantized base keeps them float.
"""

import os

import jax.numpy as jnp
import numpy as np

from rl_post.models import gguf, hf_mapping, quant, quant4
from rl_post.models.config import ModelConfig

BLOCK = 32
Q4_TYPES = ("Q4_0", "Q4_1")
_PROJECTION_PATHS = {("blocks", module, target)
                     for module, targets in quant.PROJECTIONS.items() for target in targets}


def q4_blocks(tensor) -> dict:
  """One Q4_0/Q4_1 GGUF tensor's raw blocks: {"codes": uint8 [N, K / 2],
  "d": float16 [N, K / 32], "m": float16 [N, K / 32] (Q4_1 only)}."""
  kind = tensor.tensor_type.name
  if kind not in Q4_TYPES:
    raise ValueError(f"GGUF tensor {tensor.name!r} is {kind}; a 4-bit base reads "
                     f"{' or '.join(Q4_TYPES)} blocks")
  rows = int(tensor.shape[1])
  header = 2 if kind == "Q4_0" else 4
  raw = np.asarray(tensor.data, np.uint8).reshape(rows, -1, header + BLOCK // 2)
  out = {"codes": raw[..., header:].reshape(rows, -1),
         "d": np.ascontiguousarray(raw[..., :2]).view(np.float16)[..., 0]}
  if kind == "Q4_1":
    out["m"] = np.ascontiguousarray(raw[..., 2:4]).view(np.float16)[..., 0]
  return out


def _projection(source, name: str, affine: bool):
  """(packed [K / 2, N], scale [K / 32, N], offset [K / 32, N] or None) in our
  layout for one HF-named projection of `source` (a `gguf.GGUFSource`)."""
  blocks = q4_blocks(source.tensor(name))
  heads = source.permuted_heads(name)
  if heads is not None:
    blocks = {k: gguf._unpermute(v, heads) for k, v in blocks.items()}
  scale = blocks["d"].astype(np.float32)
  offset = None
  if affine:
    offset = blocks["m"].astype(np.float32) if "m" in blocks else -8 * scale
  return (np.ascontiguousarray(blocks["codes"].T), np.ascontiguousarray(scale.T),
          None if offset is None else np.ascontiguousarray(offset.T))


def _stacked_shape(shape, target: str, divisor: int):
  """A stacked projection's shape [L, *in, *out] with its last input dim / divisor."""
  axis = quant.packed_axis(target, len(shape))
  return shape[:axis] + (shape[axis] // divisor,) + shape[axis + 1:]


def load_q4_base(path_or_reader, *, dtype: str = "float32") -> tuple[ModelConfig, dict]:
  """(ModelConfig, frozen 4-bit base) from a GGUF file whose block projections
  are Q4_0/Q4_1 (other tensors: any type `gguf.load` reads, made `dtype`).

  Raises:
    ValueError: a projection of another type, or one whose last input dim
      (in our layout) is not a multiple of 32.
  """
  reader = (gguf.open_reader(path_or_reader) if isinstance(path_or_reader, (str, os.PathLike))
            else path_or_reader)
  config, arch = gguf.config_from_gguf(reader, dtype=dtype)
  source = gguf.GGUFSource(reader, config, arch)
  specs = {spec.path: spec for spec in hf_mapping.param_specs(config)}
  names = [specs[p].name(i) for p in sorted(_PROJECTION_PATHS) for i in range(config.num_layers)]
  for name in names:
    if source.quant_type(name) not in Q4_TYPES:
      raise ValueError(f"GGUF tensor {name!r} is {source.quant_type(name)}; a 4-bit base "
                       f"reads {' or '.join(Q4_TYPES)} blocks")
  affine = any(source.quant_type(name) == "Q4_1" for name in names)
  np_dtype = np.dtype(jnp.dtype(dtype))
  params, scales, offsets = {}, {}, {}
  for path, spec in specs.items():
    full = spec.full_shape(config.num_layers)
    if path not in _PROJECTION_PATHS:
      if spec.per_layer:
        value = np.stack([spec.to_ours(source.get(spec.name(i)))
                          for i in range(config.num_layers)])
      else:
        value = spec.to_ours(source.get(spec.name()))
      hf_mapping.set_path(params, path, jnp.asarray(np.asarray(value, np_dtype)))
      continue
    _, module, target = path
    last_in = full[quant.packed_axis(target, len(full))]
    if last_in % BLOCK:
      raise ValueError(f"{module}.{target}'s last input dim ({last_in}) is not a multiple of "
                       f"the GGUF block ({BLOCK})")
    parts = [_projection(source, spec.name(i), affine) for i in range(config.num_layers)]
    hf_mapping.set_path(params, path, jnp.asarray(
        np.stack([p[0] for p in parts]).reshape(_stacked_shape(full, target, 2))))
    scale_shape = _stacked_shape(full, target, BLOCK)
    scales.setdefault(module, {})[target] = jnp.asarray(
        np.stack([p[1] for p in parts]).reshape(scale_shape))
    if affine:
      offsets.setdefault(module, {})[target] = jnp.asarray(
          np.stack([p[2] for p in parts]).reshape(scale_shape))
  frozen = {"params": params, "scales": scales,
            "codebook": quant4.codebook("q4_1" if affine else "int4")}
  if affine:
    frozen["offsets"] = offsets
  return config, frozen
