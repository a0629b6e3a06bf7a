"""Decode attention in Pallas: one new query per row over a ragged KV cache.

Decode reads the whole valid cache once per step, so it is bound by memory
bandwidth, not FLOPs. The kernel therefore (1) reads each K/V tile once for
all G query heads of its KV head (GQA), (2) stops at the row's valid length
instead of streaming the padded cache, and (3) splits the sequence across
programs ("split-K": grid (B, Hkv, splits)) so that small batches still fill
the GPU; the per-split partial outputs are merged with their log-sum-exps.
The query heads of a group are padded to `min_rows` tile rows because tensor
core dots need at least 16 rows; the padding costs FLOPs, not bandwidth.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu

from rl_post.kernels import block_math as bm
from rl_post.kernels import masking

# Enough programs to cover an H200's 132 SMs about twice.
_TARGET_PROGRAMS = 264
# K and V blocks are double-buffered in VMEM: 4 x 2 MiB stays well inside
# the default scoped VMEM limit of every TPU generation.
_TPU_BLOCK_BYTES = 2 * 2 ** 20


@dataclasses.dataclass(frozen=True)
class DecodeBlockSizes:
  block_k: int = 128
  num_splits: int = 0  # 0: choose from the batch and cache sizes
  min_rows: int = 16
  num_warps: int = 4
  num_stages: int = 2


def _one_head(q, k_at, v_at, length, start, split_len, block_k, scale):
  """Partial attention of q [rows, D] over one split of one KV head."""
  rows, head_dim = q.shape
  n_blocks = jnp.clip(lax.div(length - start + block_k - 1, block_k), 0,
                      split_len // block_k)

  def body(j, carry):
    ks = pl.ds(j * block_k, block_k)
    mask = bm.tile_mask(0, start + j * block_k, (rows, block_k), causal=False,
                        sliding_window=None, kv_len=length)
    return bm.online_softmax_step(q, k_at(ks), v_at(ks), carry, mask, scale)

  return bm.finalize(*lax.fori_loop(0, n_blocks, body,
                                    bm.zero_carry(rows, head_dim)))


def _gpu_kernel(q_ref, k_ref, v_ref, len_ref, o_ref, lse_ref, *, block_k,
                scale):
  """Grid (B, Hkv, splits); refs: q [rows, D], k/v [split, D], len scalar."""
  split_len = k_ref.shape[0]
  out, lse = _one_head(q_ref[...], lambda ks: k_ref[ks, :],
                       lambda ks: v_ref[ks, :], len_ref[()],
                       pl.program_id(2) * split_len, split_len, block_k, scale)
  o_ref[...] = out
  lse_ref[...] = lse


def _tpu_kernel(q_ref, k_ref, v_ref, len_ref, o_ref, lse_ref, *, block_k,
                scale):
  """Grid (B, splits); refs: q [Hkv, rows, D], k/v [split, Hkv, D], lengths
  [B] in SMEM. All KV heads share one block: Mosaic tiles the last two dims
  (Hkv, D) of the cache as is, so the cache is never transposed."""
  split_len, h_kv = k_ref.shape[0], k_ref.shape[1]
  length = len_ref[pl.program_id(0)]
  start = pl.program_id(1) * split_len
  for kh in range(h_kv):
    out, lse = _one_head(q_ref[kh], lambda ks, kh=kh: k_ref[ks, kh, :],
                         lambda ks, kh=kh: v_ref[ks, kh, :], length, start,
                         split_len, block_k, scale)
    o_ref[kh] = out
    lse_ref[kh] = lse


def _num_splits(blocks, batch, h_kv, max_len):
  n_tiles = max_len // blocks.block_k
  want = blocks.num_splits or max(1, -(-_TARGET_PROGRAMS // (batch * h_kv)))
  want = min(want, n_tiles)
  while n_tiles % want:  # splits must tile the cache exactly
    want -= 1
  return want


def _tpu_splits(blocks, max_len, bytes_per_token):
  """Fewest splits whose K (or V) block stays under _TPU_BLOCK_BYTES of VMEM."""
  n_tiles = max_len // blocks.block_k
  splits = blocks.num_splits or 1
  while splits < n_tiles and (
      n_tiles % splits or
      max_len // splits * bytes_per_token > _TPU_BLOCK_BYTES):
    splits += 1
  return splits


def decode_attention(q, k_cache, v_cache, lengths, *, block_sizes=None,
                     platform="gpu", interpret=False):
  """Pallas decode attention; args and semantics as the public contract.

  Args:
    q: [B, H, D]; k_cache, v_cache: [B, S, Hkv, D]; lengths: [B] int.
    block_sizes: `DecodeBlockSizes`.
    platform: "gpu" (Triton: one program per KV head and split) or "tpu"
      (Mosaic: one program per split holding all KV heads; lengths in SMEM).
    interpret: run the kernel on CPU.
  Returns:
    [B, H, D] in q's dtype; rows with length 0 are zeros.
  """
  masking.validate_decode_shapes(q, k_cache, v_cache, lengths)
  b, h, d = q.shape
  s, h_kv = k_cache.shape[1], k_cache.shape[2]
  blocks = block_sizes or DecodeBlockSizes()
  bk = min(blocks.block_k, bm.round_up(s, 8))
  blocks = dataclasses.replace(blocks, block_k=bk)
  if s % bk:  # a copy of the cache; size caches in multiples of block_k
    k_cache = bm.pad_to(k_cache, 1, bm.round_up(s, bk))
    v_cache = bm.pad_to(v_cache, 1, bm.round_up(s, bk))
  s_pad = k_cache.shape[1]
  group = h // h_kv
  if platform == "gpu":  # Triton tiles: power-of-two rows and head_dim
    if d != pl.next_power_of_2(d) and not interpret:
      raise ValueError(
          f"Pallas GPU decode needs a power-of-two head_dim, got {d}; padding "
          "would copy the whole cache each step. Use impl='xla'.")
    rows = max(blocks.min_rows, pl.next_power_of_2(group))
  else:
    rows = max(8, group)
  if platform == "tpu":
    splits = _tpu_splits(blocks, s_pad, h_kv * d * k_cache.dtype.itemsize)
  else:
    splits = _num_splits(blocks, b, h_kv, s_pad)
  split_len = s_pad // splits
  q4 = bm.pad_to(q.reshape(b, h_kv, group, d), 2, rows)

  out_shape = [jax.ShapeDtypeStruct((b, h_kv, splits, rows, d), jnp.float32),
               jax.ShapeDtypeStruct((b, h_kv, splits, rows, 1), jnp.float32)]
  if platform == "tpu":
    grid = (b, splits)
    kernel = _tpu_kernel
    q_spec = pl.BlockSpec((None, h_kv, rows, d), lambda b_, sp: (b_, 0, 0, 0))
    kv_spec = pl.BlockSpec((None, split_len, h_kv, d),
                           lambda b_, sp: (b_, sp, 0, 0))
    len_spec = pl.BlockSpec(memory_space=pltpu.SMEM)
    out_specs = [pl.BlockSpec((None, h_kv, None, rows, w),
                              lambda b_, sp: (b_, 0, sp, 0, 0)) for w in (d, 1)]
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))
  else:
    grid = (b, h_kv, splits)
    kernel = _gpu_kernel
    q_spec = pl.BlockSpec((None, None, rows, d), lambda b_, kh, sp: (b_, kh, 0, 0))
    kv_spec = pl.BlockSpec((None, split_len, None, d),
                           lambda b_, kh, sp: (b_, sp, kh, 0))
    len_spec = pl.BlockSpec((None,), lambda b_, kh, sp: (b_,))
    out_specs = [pl.BlockSpec((None, None, None, rows, w),
                              lambda b_, kh, sp: (b_, kh, sp, 0, 0)) for w in (d, 1)]
    params = plgpu.CompilerParams(num_warps=blocks.num_warps,
                                  num_stages=blocks.num_stages)
  out, lse = pl.pallas_call(
      functools.partial(kernel, block_k=bk, scale=1.0 / math.sqrt(d)),
      grid=grid,
      in_specs=[q_spec, kv_spec, kv_spec, len_spec],
      out_specs=out_specs,
      out_shape=out_shape,
      compiler_params=params,
      interpret=interpret,
      name="rl_post_decode_attention",
  )(q4, k_cache, v_cache, lengths.astype(jnp.int32))
  # Merge the splits: weights exp(lse_s - max lse); empty splits have out 0.
  weights = jnp.exp(lse - lse.max(axis=2, keepdims=True))
  merged = (weights * out).sum(2) / weights.sum(2)
  return merged[:, :, :group].reshape(b, h, d).astype(q.dtype)
