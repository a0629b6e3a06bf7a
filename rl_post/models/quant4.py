"""Blockwise 4-bit weights: packed codes, per-block scales, a 16-entry codebook.

A weight W [K, N] (K the matmul's input dim) is cut along K into G = K / B
blocks of B values per output column. Each value becomes a 4-bit code c in
[0, 16), stored two per uint8 byte, and reads back as

  W_kn ~ codebook[c_kn] * s_gn (+ o_gn),   g = k // B

with one scale s (and, for "q4_1", one offset o) per block. Three formats:

- "int4": codebook[c] = c - 8 (llama.cpp's Q4_0 codes), s = max |W_block| / 7,
  so codes 1..15 are used and every value is within s / 2 of W.
- "nf4": the NormalFloat4 levels of QLoRA (quantiles of a normal, in
  [-1, 1], with an exact 0), s = max |W_block|; a value is within
  `HALF_GAP["nf4"]` * s of W (half the widest gap between adjacent levels).
- "q4_1": llama.cpp's Q4_1, affine: codebook[c] = c, o = min W_block,
  s = (max W_block - o) / 15; every value is within s / 2 of W.

Packing follows Q4_0's layout inside each block: byte j (j < B / 2) holds
element j in its low nibble and element j + B / 2 in its high nibble, so a
GGUF Q4_0/Q4_1 block's 16 bytes are our bytes unchanged (B = 32).

Arrays here are one weight [K, N] (a layer's projection, flattened); the
stacked [L, ...] base is handled by `rl_post.models.quant`.
"""

import jax.numpy as jnp
import numpy as np

FORMATS = ("int4", "nf4", "q4_1")
AFFINE = ("q4_1",)  # formats with a per-block offset
NF4_LEVELS = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
              -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
              0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
              0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
              0.7229568362236023, 1.0)
CODEBOOKS = {"int4": tuple(float(c - 8) for c in range(16)), "nf4": NF4_LEVELS,
             "q4_1": tuple(float(c) for c in range(16))}
# the block's range (max |W| symmetric, max - min affine) maps to this many levels' span
SCALE_DIVISOR = {"int4": 7.0, "nf4": 1.0, "q4_1": 15.0}


def _half_gap(levels) -> float:
  return float(np.max(np.diff(np.asarray(levels, np.float64)))) / 2


HALF_GAP = {name: _half_gap(levels) for name, levels in CODEBOOKS.items()}


def codebook(fmt: str):
  """The 16 float32 levels of a format."""
  return jnp.asarray(CODEBOOKS[fmt], jnp.float32)


def pack_KxN(codes_KxN, block_size: int):
  """uint8 [K / 2, N]: two 4-bit codes per byte, Q4_0's order inside each block
  (byte j: element j low, element j + B / 2 high)."""
  k, n = codes_KxN.shape
  c = codes_KxN.astype(jnp.uint8).reshape(k // block_size, block_size, n)
  half = block_size // 2
  return (c[:, :half] | (c[:, half:] << 4)).reshape(k // 2, n)


def unpack_KxN(packed_K2xN, block_size: int):
  """The uint8 codes [K, N] that `pack_KxN` packed."""
  k2, n = packed_K2xN.shape
  p = packed_K2xN.reshape(k2 * 2 // block_size, block_size // 2, n)
  return jnp.concatenate([p & 15, p >> 4], axis=1).reshape(k2 * 2, n)


def quantize_KxN(w_KxN, fmt: str, block_size: int):
  """(packed uint8 [K / 2, N], scales f32 [K / B, N], offsets f32 [K / B, N] for
  an affine format, else None): nearest level per value; a constant block
  (all zero, for a symmetric format) gets scale 1 and reads back exactly."""
  k, n = w_KxN.shape
  w_GxBxN = w_KxN.astype(jnp.float32).reshape(k // block_size, block_size, n)
  offset_GxN = None
  if fmt in AFFINE:
    offset_GxN = jnp.min(w_GxBxN, axis=1)
    scale_GxN = (jnp.max(w_GxBxN, axis=1) - offset_GxN) / SCALE_DIVISOR[fmt]
    w_GxBxN = w_GxBxN - offset_GxN[:, None]
  else:
    scale_GxN = jnp.max(jnp.abs(w_GxBxN), axis=1) / SCALE_DIVISOR[fmt]
  scale_GxN = jnp.where(scale_GxN > 0, scale_GxN, 1.0)
  levels = codebook(fmt)
  midpoints = (levels[1:] + levels[:-1]) / 2
  codes = jnp.searchsorted(midpoints, w_GxBxN / scale_GxN[:, None], side="left")
  return pack_KxN(codes.reshape(k, n), block_size), scale_GxN, offset_GxN


def dequantize_KxN(packed_K2xN, scale_GxN, levels_16, offset_GxN=None, dtype=jnp.float32):
  """W [K, N] in `dtype`: levels[code] * scale (+ offset), computed in float32."""
  g, n = scale_GxN.shape
  k = packed_K2xN.shape[0] * 2
  codes = unpack_KxN(packed_K2xN, k // g).reshape(g, k // g, n)
  w = levels_16.astype(jnp.float32)[codes] * scale_GxN.astype(jnp.float32)[:, None]
  if offset_GxN is not None:
    w = w + offset_GxN.astype(jnp.float32)[:, None]
  return w.reshape(k, n).astype(dtype)


def error_bound_MxN(x_MxK, scale_GxN, fmt: str):
  """The largest |x @ W - x @ dequantize(W)| `quantize_KxN` can give:
  sum_k |x_mk| * HALF_GAP * |s_{k // B, n}| (blocks of the input summed first)."""
  g = scale_GxN.shape[0]
  m, k = x_MxK.shape
  abs_x_MxG = jnp.abs(x_MxK.astype(jnp.float32)).reshape(m, g, k // g).sum(-1)
  return HALF_GAP[fmt] * abs_x_MxG @ jnp.abs(scale_GxN.astype(jnp.float32))
