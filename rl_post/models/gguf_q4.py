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

`keeps_blocks` says whether a run's `lora.base_quant` and block size are
what a file's blocks hold (the trainers then load them with `load_q4_base`,
`rl_post.models.pretrained.load_base`), and names the setting that would
keep them when they are not.
"""

import os

import jax.numpy as jnp
import numpy as np

from rl_post.models import gguf, hf_mapping, quant, quant4
from rl_post.models.config import ModelConfig

BLOCK = 32
Q4_TYPES = ("Q4_0", "Q4_1")
GGUF_FORMATS = ("int4", "q4_1")  # the `lora.base_quant` formats GGUF blocks are


class BlockMismatch(ValueError):
  """`lora.base_quant` or `lora.base_quant_block_size` names a GGUF block
  format that a file's own 4-bit blocks are not (`keeps_blocks`).

  Attributes:
    key: the LoraConfig field at fault ("base_quant" or "base_quant_block_size").
    value: its value.
    problem: what the file holds, and the setting that loads it as it is.
  """

  def __init__(self, key: str, value, problem: str):
    self.key, self.value, self.problem = key, value, problem
    super().__init__(f"lora.{key}={value!r}: {problem}")


def projection_names(config: ModelConfig) -> list[str]:
  """The HF names of every layer's block projections."""
  specs = {spec.path: spec for spec in hf_mapping.param_specs(config)}
  return [specs[p].name(i) for p in sorted(quant.PROJECTION_PATHS)
          for i in range(config.num_layers)]


def projection_types(source, config: ModelConfig) -> set[str]:
  """The GGUF types of the block projections of `source` (a `gguf.GGUFSource`),
  e.g. {"Q4_1"} or {"Q4_0", "Q8_0"}."""
  return {source.quant_type(name) for name in projection_names(config)}


def keeps_blocks(types, base_quant: str, block_size: int) -> bool:
  """Whether block projections of the GGUF `types` are, as they are, a frozen
  base of `base_quant` with blocks of `block_size` (what `load_q4_base` reads):
  "q4_1" for Q4_0 and Q4_1 blocks, "int4" for Q4_0 blocks alone, both with
  blocks of 32.

  False where some projection is not a Q4_0/Q4_1 tensor or `base_quant` is
  "nf4" or "int8", formats no GGUF block is: that base is quantized from
  the file's dequantized values.

  Raises:
    BlockMismatch: 4-bit blocks and a `base_quant` that names a GGUF block
      format, but not theirs: "int4" for Q4_1 blocks (an int4 base has no
      offsets), or a block size other than 32. Quantizing those blocks again
      would add a second 4-bit rounding to the file's own; the error names
      the setting that keeps them.
  """
  types = set(types)
  if base_quant not in GGUF_FORMATS or not types <= set(Q4_TYPES):
    return False
  held = " and ".join(sorted(types))
  if base_quant == "int4" and "Q4_1" in types:
    raise BlockMismatch("base_quant", base_quant, f"the GGUF file's block projections are "
                        f"{held} blocks, and a Q4_1 block's offset has no place in an int4 "
                        f"base: set base_quant='q4_1' (base_quant_block_size={BLOCK}) to "
                        "load them as they are")
  if block_size != BLOCK:
    raise BlockMismatch("base_quant_block_size", block_size, f"the GGUF file's block "
                        f"projections are {held} blocks of {BLOCK} values: set "
                        f"base_quant_block_size={BLOCK} to load them as they are (blocks of "
                        f"{block_size} would quantize its 4-bit values a second time)")
  return True


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


def load_q4_base(path_or_reader, *, dtype: str = "float32",
                 base_quant: str | None = None) -> tuple[ModelConfig, dict]:
  """(ModelConfig, frozen 4-bit base) from a GGUF file whose block projections
  are Q4_0/Q4_1 (other tensors: any type `gguf.load` reads, made `dtype`).

  Args:
    base_quant: the base to make, "int4" (every block Q4_0) or "q4_1" (Q4_0
      blocks get the offset -8 d); None: "int4" when every block is Q4_0,
      else "q4_1".
  Raises:
    ValueError: a projection of another type, or one whose last input dim
      (in our layout) is not a multiple of 32; `BlockMismatch`: "int4" for
      a file with Q4_1 blocks.
  """
  if base_quant not in (None,) + GGUF_FORMATS:
    raise ValueError(f"a GGUF 4-bit base is one of {GGUF_FORMATS}, got {base_quant!r}")
  reader = (gguf.open_reader(path_or_reader) if isinstance(path_or_reader, (str, os.PathLike))
            else path_or_reader)
  config, arch = gguf.config_from_gguf(reader, dtype=dtype)
  source = gguf.GGUFSource(reader, config, arch)
  specs = {spec.path: spec for spec in hf_mapping.param_specs(config)}
  for name in projection_names(config):
    if source.quant_type(name) not in Q4_TYPES:
      raise ValueError(f"GGUF tensor {name!r} is {source.quant_type(name)}; a 4-bit base "
                       f"reads {' or '.join(Q4_TYPES)} blocks")
  types = projection_types(source, config)
  if base_quant is None:
    base_quant = "q4_1" if "Q4_1" in types else "int4"
  keeps_blocks(types, base_quant, BLOCK)  # raises for int4 over Q4_1 blocks
  affine = base_quant == "q4_1"
  np_dtype = np.dtype(jnp.dtype(dtype))
  params, scales, offsets = {}, {}, {}
  for path, spec in specs.items():
    full = spec.full_shape(config.num_layers)
    if path not in quant.PROJECTION_PATHS:
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
