"""The frozen base under LoRA, quantized (QLoRA): int8 per channel or 4-bit blockwise.

Each projection W [in, out] of every layer (q, k, v, o, gate, up, down) is
stored in one of two ways (`lora.base_quant`); embeddings, norms and the
output head stay float.

"int8": int8 q with one float32 scale per output channel,
s_n = max_k |W_kn| / 127, q = round(W / s), so |W - q s| <= s / 2 per
entry. A matmul then never needs the float weight: x @ (q s) = (x @ q) s,
the int8 values cast to the compute dtype (exact: |q| <= 127) and the
scale applied to the output (`rl_post.models.lora.Adapters.dense`). For
x of M rows, the quantized product is within sum_k |x_mk| * s_n / 2 of the
float one (`error_bound_MxN`).

"int4" / "nf4" / "q4_1": 4-bit codes packed two per byte with one float32
scale (and for "q4_1" one offset) per block of B input values per output
column (`rl_post.models.quant4`). The
layer scan dequantizes one layer's projection at a time, right before its
matmul; the stacked base stays packed. The packed codes keep the
projection's rank with its last input dim halved ([L, E, H, D] ->
[L, E / 2, H, D]; o_proj [L, H, D, E] -> [L, H, D / 2, E]) and the scales
have that dim divided by B, so both carry the projection's own logical
axes and shard like it. B must divide that last input dim.

Quantized base: `{"params": params with quantized projections, "scales":
{module: {target: array}}}`, and for 4-bit also "codebook" (the format's
16 float32 levels, which makes the base self-describing) and, for "q4_1"
(also what `rl_post.models.gguf_q4.load_q4_base` makes of GGUF Q4_1
blocks), "offsets" shaped like the scales.
"""

import math

import jax
import jax.numpy as jnp

from rl_post.models import quant4

PROJECTIONS = {"attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate", "up", "down")}
PROJECTION_PATHS = frozenset(("blocks", module, target)  # their paths in the params tree
                             for module, targets in PROJECTIONS.items() for target in targets)
QMAX = 127
FORMATS = ("int8",) + quant4.FORMATS


def _out_ndim(module: str, target: str) -> int:
  """How many trailing dims of a stacked projection [L, *in, *out] are its output."""
  return 2 if target in ("q_proj", "k_proj", "v_proj") else 1


def packed_axis(target: str, ndim: int) -> int:
  """The axis of a stacked projection [L, *in, *out] that 4-bit packing halves
  (its last input dim)."""
  return ndim - _out_ndim("", target) - 1


def quantize_KxN(w_KxN):
  """(q_KxN int8, scale_N f32): symmetric per-output-channel int8; an all-zero
  channel gets scale 1 (its q is 0)."""
  w = w_KxN.astype(jnp.float32)
  scale_N = jnp.max(jnp.abs(w), axis=0) / QMAX
  scale_N = jnp.where(scale_N > 0, scale_N, 1.0)
  q = jnp.clip(jnp.round(w / scale_N[None]), -QMAX, QMAX).astype(jnp.int8)
  return q, scale_N


def error_bound_MxN(x_MxK, scale_N):
  """The largest |x @ W - (x @ q) s| quantization can give: sum_k |x_mk| * s_n / 2."""
  return jnp.abs(x_MxK.astype(jnp.float32)).sum(-1, keepdims=True) * scale_N[None] / 2


def check_block_size(params: dict, block_size: int):
  """Raises a one-line ValueError unless `block_size` is even and divides the
  last input dim of every block projection."""
  if not isinstance(block_size, int) or block_size < 2 or block_size % 2:
    raise ValueError(f"lora.base_quant_block_size must be an even int >= 2, got {block_size!r}")
  for module, targets in PROJECTIONS.items():
    for target in targets:
      shape = params["blocks"][module][target].shape
      size = shape[packed_axis(target, len(shape))]
      if size % block_size:
        raise ValueError(f"lora.base_quant_block_size={block_size} does not divide the last "
                         f"input dim of {module}.{target} ({size}); pick a divisor of it")


def quantize_base(params: dict, base_quant: str = "int8", block_size: int = 64) -> dict:
  """The quantized base (see the module docstring) from float `params`."""
  if base_quant not in FORMATS:
    raise ValueError(f"lora.base_quant must be one of {('',) + FORMATS}, got {base_quant!r}")
  four_bit = base_quant != "int8"
  if four_bit:
    check_block_size(params, block_size)
  blocks = {k: dict(v) for k, v in params["blocks"].items()}
  scales, offsets = {}, {}
  for module, targets in PROJECTIONS.items():
    for target in targets:
      w = blocks[module][target]
      out_shape = w.shape[w.ndim - _out_ndim(module, target):]
      w_LxKxN = w.reshape(w.shape[0], -1, math.prod(out_shape))
      if four_bit:
        packed, s, o = jax.vmap(lambda x: quant4.quantize_KxN(x, base_quant, block_size))(
            w_LxKxN)
        axis = packed_axis(target, w.ndim)
        packed_shape = w.shape[:axis] + (w.shape[axis] // 2,) + w.shape[axis + 1:]
        scale_shape = w.shape[:axis] + (w.shape[axis] // block_size,) + w.shape[axis + 1:]
        blocks[module][target] = packed.reshape(packed_shape)
        scales.setdefault(module, {})[target] = s.reshape(scale_shape)
        if o is not None:
          offsets.setdefault(module, {})[target] = o.reshape(scale_shape)
      else:
        q, s = jax.vmap(quantize_KxN)(w_LxKxN)
        blocks[module][target] = q.reshape(w.shape)
        scales.setdefault(module, {})[target] = s.reshape((w.shape[0],) + out_shape)
  out = {"params": dict(params, blocks=blocks), "scales": scales}
  if four_bit:
    out["codebook"] = quant4.codebook(base_quant)
  if offsets:
    out["offsets"] = offsets
  return out


def dequantize_layer_KxN(w, scale, levels_16, offset, k: int, dtype):
  """One layer's projection as a float [K, N] weight in `dtype`: a 4-bit packed
  one ([*in with its last dim halved, *out]) dequantized blockwise."""
  n = w.size * 2 // k
  return quant4.dequantize_KxN(w.reshape(k // 2, n), scale.reshape(-1, n), levels_16,
                               None if offset is None else offset.reshape(-1, n), dtype)


def dequantize_base(quantized: dict, dtype=None) -> dict:
  """Float params from a quantized base, in `dtype` (default: the embedding's,
  the params' own dtype)."""
  params = quantized["params"]
  dtype = params["embed"]["embedding"].dtype if dtype is None else dtype
  levels, offsets = quantized.get("codebook"), quantized.get("offsets")
  blocks = {k: dict(v) for k, v in params["blocks"].items()}
  for module, targets in quantized["scales"].items():
    for target, s in targets.items():
      q = blocks[module][target]
      if levels is not None:
        axis = packed_axis(target, q.ndim)
        shape = q.shape[:axis] + (q.shape[axis] * 2,) + q.shape[axis + 1:]
        k = math.prod(shape[1:axis + 1])
        o = None if offsets is None else offsets[module][target]
        w = jax.vmap(lambda q_, s_, o_: dequantize_layer_KxN(q_, s_, levels, o_, k, dtype))(
            q, s, o)
        blocks[module][target] = w.reshape(shape)
        continue
      s = s.reshape(s.shape[:1] + (1,) * (q.ndim - s.ndim) + s.shape[1:])
      blocks[module][target] = (q.astype(jnp.float32) * s).astype(dtype)
  return dict(params, blocks=blocks)


def frozen_logical_axes(param_axes: dict, base_quant: str) -> dict:
  """Logical axes of a quantized base: the params keep theirs; int8 scales keep
  their projection's output axes, 4-bit scales (and offsets) all its axes;
  the codebook is replicated."""
  scales, offsets = {}, {}
  for module, targets in PROJECTIONS.items():
    for target in targets:
      axes = param_axes["blocks"][module][target]
      if base_quant == "int8":
        axes = (axes[0],) + axes[len(axes) - _out_ndim(module, target):]
      scales.setdefault(module, {})[target] = axes
  out = {"params": param_axes, "scales": scales}
  if base_quant != "int8":
    out["codebook"] = (None,)
    if base_quant in quant4.AFFINE:
      out["offsets"] = scales
  return out


def is_quantized(frozen) -> bool:
  """Whether a train state's frozen base is `quantize_base` output."""
  return isinstance(frozen, dict) and "params" in frozen and "scales" in frozen


def base_params(frozen) -> dict:
  """The frozen base as float params (a dequantized copy when it is quantized)."""
  return dequantize_base(frozen) if is_quantized(frozen) else frozen
