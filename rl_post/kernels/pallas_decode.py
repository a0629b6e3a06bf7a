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


@dataclasses.dataclass(frozen=True)
class DecodeBlockSizes:
  block_k: int = 128
  num_splits: int = 0  # 0: choose from the batch and cache sizes
  min_rows: int = 16
  num_warps: int = 4
  num_stages: int = 2


def _kernel(q_ref, k_ref, v_ref, len_ref, o_ref, lse_ref, *, block_k):
  split_len = k_ref.shape[0]
  start = pl.program_id(2) * split_len
  length = len_ref[()]
  q = q_ref[...]
  rows, head_dim = q.shape
  n_blocks = jnp.clip(lax.div(length - start + block_k - 1, block_k), 0,
                      split_len // block_k)

  def body(j, carry):
    ks = pl.ds(j * block_k, block_k)
    mask = bm.tile_mask(0, start + j * block_k, (rows, block_k), causal=False,
                        sliding_window=None, kv_len=length)
    return bm.online_softmax_step(q, k_ref[ks, :], v_ref[ks, :], carry, mask,
                                  1.0 / math.sqrt(head_dim))

  carry = lax.fori_loop(0, n_blocks, body, bm.zero_carry(rows, head_dim))
  out, lse = bm.finalize(*carry)
  o_ref[...] = out
  lse_ref[...] = lse


def _num_splits(blocks, batch, h_kv, max_len):
  n_tiles = max_len // blocks.block_k
  want = blocks.num_splits or max(1, -(-_TARGET_PROGRAMS // (batch * h_kv)))
  want = min(want, n_tiles)
  while n_tiles % want:  # splits must tile the cache exactly
    want -= 1
  return want


def decode_attention(q, k_cache, v_cache, lengths, *, block_sizes=None,
                     platform="gpu", interpret=False):
  """Pallas decode attention; args and semantics as the public contract.

  Args:
    q: [B, H, D]; k_cache, v_cache: [B, S, Hkv, D]; lengths: [B] int.
    block_sizes: `DecodeBlockSizes`.
    platform: "gpu" (Triton) or "tpu" (Mosaic: lengths live in SMEM).
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
  rows = max(blocks.min_rows, group)
  splits = _num_splits(blocks, b, h_kv, s_pad)
  split_len = s_pad // splits
  q4 = bm.pad_to(q.reshape(b, h_kv, group, d), 2, rows)

  kv_spec = pl.BlockSpec((None, split_len, None, d),
                         lambda b_, kh, sp: (b_, sp, kh, 0))
  if platform == "tpu":
    len_spec = pl.BlockSpec((None,), lambda b_, kh, sp: (b_,),
                            memory_space=pltpu.SMEM)
    params = pltpu.CompilerParams(
        dimension_semantics=("parallel", "parallel", "parallel"))
  else:
    len_spec = pl.BlockSpec((None,), lambda b_, kh, sp: (b_,))
    params = plgpu.CompilerParams(num_warps=blocks.num_warps,
                                  num_stages=blocks.num_stages)
  out, lse = pl.pallas_call(
      functools.partial(_kernel, block_k=bk),
      grid=(b, h_kv, splits),
      in_specs=[pl.BlockSpec((None, None, rows, d), lambda b_, kh, sp: (b_, kh, 0, 0)),
                kv_spec, kv_spec, len_spec],
      out_specs=[
          pl.BlockSpec((None, None, None, rows, d),
                       lambda b_, kh, sp: (b_, kh, sp, 0, 0)),
          pl.BlockSpec((None, None, None, rows, 1),
                       lambda b_, kh, sp: (b_, kh, sp, 0, 0))],
      out_shape=[jax.ShapeDtypeStruct((b, h_kv, splits, rows, d), jnp.float32),
                 jax.ShapeDtypeStruct((b, h_kv, splits, rows, 1), jnp.float32)],
      compiler_params=params,
      interpret=interpret,
      name="rl_post_decode_attention",
  )(q4, k_cache, v_cache, lengths.astype(jnp.int32))
  # Merge the splits: weights exp(lse_s - max lse); empty splits have out 0.
  weights = jnp.exp(lse - lse.max(axis=2, keepdims=True))
  merged = (weights * out).sum(2) / weights.sum(2)
  return merged[:, :, :group].reshape(b, h, d).astype(q.dtype)
