"""Flash attention for GPUs in Pallas (Triton lowering): forward and backward.

Three kernels, FlashAttention-2 style:
  forward:  one program per (batch, head, query block), loops over KV blocks
            with an online softmax, writes the output and the LSE;
  dK/dV:    one program per (batch, KV head, KV block), loops over the query
            heads of its group and the query blocks that see it, so GQA
            gradients are accumulated in registers, never repeated in memory;
  dQ:       one program per (batch, head, query block), loops over KV blocks.
K/V are read through the KV head index `h // group`, never repeated. Loops
only visit blocks that the causal mask and the window leave live. Lengths
that are not a multiple of the blocks are padded here and masked in-kernel.
"""

import dataclasses
import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from rl_post.kernels import block_math as bm
from rl_post.kernels import masking


@dataclasses.dataclass(frozen=True)
class GpuBlockSizes:
  """Tile sizes (powers of two for Triton) and launch settings."""
  block_q: int = 64
  block_k: int = 64
  block_q_bwd: int = 64
  block_k_bwd: int = 64
  num_warps: int = 4
  num_stages: int = 2

  @classmethod
  def for_head_dim(cls, head_dim):
    if head_dim >= 128:
      return cls(block_q=128, block_k=64, block_q_bwd=64, block_k_bwd=64,
                 num_warps=8, num_stages=3)
    return cls()


@dataclasses.dataclass(frozen=True)
class _Static:
  causal: bool
  sliding_window: Optional[int]
  q_len: int
  kv_len: int
  blocks: GpuBlockSizes
  interpret: bool
  scale: float  # 1/sqrt(true head_dim); D may be zero-padded to a power of 2

  @property
  def offset(self):
    return self.kv_len - self.q_len

  def kv_blocks(self, i, bq, bk):
    """(first query position, [lo, hi) KV blocks) of query block i."""
    q_first = self.offset + i * bq
    lo, hi = bm.kv_block_range(
        q_first, q_first + bq - 1, block_k=bk,
        num_k_blocks=pl.cdiv(self.kv_len, bk), causal=self.causal,
        sliding_window=self.sliding_window)
    return q_first, lo, hi

  def mask(self, q_first, k_first, bq, bk, q_seg, k_seg):
    """The (bq, bk) tile mask at these positions."""
    return bm.tile_mask(q_first, k_first, (bq, bk), causal=self.causal,
                        sliding_window=self.sliding_window,
                        kv_len=self.kv_len, q_seg=q_seg, k_seg=k_seg)


def _fwd_kernel(q_ref, k_ref, v_ref, *refs, st, has_seg):
  if has_seg:
    qs_ref, ks_ref, o_ref, lse_ref = refs
  else:
    o_ref, lse_ref = refs
  bq, bk = st.blocks.block_q, st.blocks.block_k
  i = pl.program_id(2)
  q = q_ref[...]
  head_dim = q.shape[-1]
  q_first, lo, hi = st.kv_blocks(i, bq, bk)
  q_seg = qs_ref[...] if has_seg else None

  def body(j, carry):
    ks = pl.ds(j * bk, bk)
    k_seg = ks_ref[:, ks] if has_seg else None
    mask = st.mask(q_first, j * bk, bq, bk, q_seg, k_seg)
    return bm.online_softmax_step(q, k_ref[ks, :], v_ref[ks, :], carry, mask,
                                  st.scale)

  carry = lax.fori_loop(lo, hi, body, bm.zero_carry(bq, head_dim))
  out, lse = bm.finalize(*carry)
  o_ref[...] = out.astype(o_ref.dtype)
  lse_ref[...] = lse


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, *refs, st,
                has_seg, group):
  if has_seg:
    qs_ref, ks_ref, dk_ref, dv_ref = refs
  else:
    dk_ref, dv_ref = refs
  bq, bk = st.blocks.block_q_bwd, st.blocks.block_k_bwd
  j = pl.program_id(2)
  k, v = k_ref[...], v_ref[...]
  head_dim = k.shape[-1]
  k_first = j * bk
  lo, hi = bm.q_block_range(
      k_first, k_first + bk - 1, offset=st.offset, block_q=bq,
      num_q_blocks=pl.cdiv(st.q_len, bq), causal=st.causal,
      sliding_window=st.sliding_window)
  k_seg = ks_ref[...] if has_seg else None
  dk = jnp.zeros((bk, head_dim), jnp.float32)
  dv = jnp.zeros((bk, head_dim), jnp.float32)
  for g in range(group):  # query heads sharing this KV head

    def body(i, carry, g=g):
      dk, dv = carry
      qsl = pl.ds(i * bq, bq)
      q_seg = qs_ref[qsl, :] if has_seg else None
      mask = st.mask(st.offset + i * bq, k_first, bq, bk, q_seg, k_seg)
      _, dk_p, dv_p = bm.tile_grads(
          q_ref[qsl, g, :], k, v, do_ref[qsl, g, :], lse_ref[g, qsl, :],
          delta_ref[g, qsl, :], mask, st.scale)
      return dk + dk_p, dv + dv_p

    dk, dv = lax.fori_loop(lo, hi, body, (dk, dv))
  dk_ref[...] = dk.astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, *refs, st,
               has_seg):
  if has_seg:
    qs_ref, ks_ref, dq_ref = refs
  else:
    (dq_ref,) = refs
  bq, bk = st.blocks.block_q_bwd, st.blocks.block_k_bwd
  i = pl.program_id(2)
  q, do, lse, delta = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...]
  head_dim = q.shape[-1]
  q_first, lo, hi = st.kv_blocks(i, bq, bk)
  q_seg = qs_ref[...] if has_seg else None

  def body(j, dq):
    ks = pl.ds(j * bk, bk)
    k_seg = ks_ref[:, ks] if has_seg else None
    mask = st.mask(q_first, j * bk, bq, bk, q_seg, k_seg)
    dq_p, _, _ = bm.tile_grads(q, k_ref[ks, :], v_ref[ks, :], do, lse, delta,
                               mask, st.scale)
    return dq + dq_p

  dq = lax.fori_loop(lo, hi, body, jnp.zeros((bq, head_dim), jnp.float32))
  dq_ref[...] = dq.astype(dq_ref.dtype)


def _padded_lengths(st):
  b = st.blocks
  tq = bm.round_up(st.q_len, math.lcm(b.block_q, b.block_q_bwd))
  tk = bm.round_up(st.kv_len, math.lcm(b.block_k, b.block_k_bwd))
  return tq, tk


def _compiler_params(st):
  return plgpu.CompilerParams(num_warps=st.blocks.num_warps,
                              num_stages=st.blocks.num_stages)


def _forward(q, k, v, seg, st):
  """q [B, Tp, H, D], k/v [B, Sp, Hkv, D] padded -> (out, lse [B, H, Tp])."""
  b, tq, h, d = q.shape
  tk, h_kv = k.shape[1], k.shape[2]
  group = h // h_kv
  bq = st.blocks.block_q
  has_seg = seg is not None
  in_specs = [
      pl.BlockSpec((None, bq, None, d), lambda b_, h_, i: (b_, i, h_, 0)),
      pl.BlockSpec((None, tk, None, d), lambda b_, h_, i: (b_, 0, h_ // group, 0)),
      pl.BlockSpec((None, tk, None, d), lambda b_, h_, i: (b_, 0, h_ // group, 0)),
  ]
  args = [q, k, v]
  if has_seg:
    in_specs += [pl.BlockSpec((None, bq, 1), lambda b_, h_, i: (b_, i, 0)),
                 pl.BlockSpec((None, 1, tk), lambda b_, h_, i: (b_, 0, 0))]
    args += list(seg)
  return pl.pallas_call(
      functools.partial(_fwd_kernel, st=st, has_seg=has_seg),
      grid=(b, h, tq // bq),
      in_specs=in_specs,
      out_specs=[
          pl.BlockSpec((None, bq, None, d), lambda b_, h_, i: (b_, i, h_, 0)),
          pl.BlockSpec((None, None, bq, 1), lambda b_, h_, i: (b_, h_, i, 0)),
      ],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, tq, 1), jnp.float32)],
      compiler_params=_compiler_params(st),
      interpret=st.interpret,
      name="rl_post_flash_fwd",
  )(*args)


def _backward(q, k, v, seg, out, lse, do, st):
  b, tq, h, d = q.shape
  tk, h_kv = k.shape[1], k.shape[2]
  group = h // h_kv
  bq, bk = st.blocks.block_q_bwd, st.blocks.block_k_bwd
  has_seg = seg is not None
  delta = jnp.einsum("bthd,bthd->bht", out.astype(jnp.float32),
                     do.astype(jnp.float32))[..., None]
  # dK, dV: one program per KV block, all query heads of the group.
  full_group = pl.BlockSpec((None, tq, group, d),
                            lambda b_, kh, j: (b_, 0, kh, 0))
  stats_group = pl.BlockSpec((None, group, tq, 1),
                             lambda b_, kh, j: (b_, kh, 0, 0))
  kv_blk = pl.BlockSpec((None, bk, None, d), lambda b_, kh, j: (b_, j, kh, 0))
  in_specs = [full_group, kv_blk, kv_blk, full_group, stats_group, stats_group]
  args = [q, k, v, do, lse, delta]
  if has_seg:
    in_specs += [pl.BlockSpec((None, tq, 1), lambda b_, kh, j: (b_, 0, 0)),
                 pl.BlockSpec((None, 1, bk), lambda b_, kh, j: (b_, 0, j))]
    args += list(seg)
  dk, dv = pl.pallas_call(
      functools.partial(_dkv_kernel, st=st, has_seg=has_seg, group=group),
      grid=(b, h_kv, tk // bk),
      in_specs=in_specs,
      out_specs=[kv_blk, kv_blk],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                 jax.ShapeDtypeStruct(v.shape, v.dtype)],
      compiler_params=_compiler_params(st),
      interpret=st.interpret,
      name="rl_post_flash_bwd_dkv",
  )(*args)
  # dQ: one program per query block.
  q_blk = pl.BlockSpec((None, bq, None, d), lambda b_, h_, i: (b_, i, h_, 0))
  kv_full = pl.BlockSpec((None, tk, None, d),
                         lambda b_, h_, i: (b_, 0, h_ // group, 0))
  stats = pl.BlockSpec((None, None, bq, 1), lambda b_, h_, i: (b_, h_, i, 0))
  in_specs = [q_blk, kv_full, kv_full, q_blk, stats, stats]
  if has_seg:
    in_specs += [pl.BlockSpec((None, bq, 1), lambda b_, h_, i: (b_, i, 0)),
                 pl.BlockSpec((None, 1, tk), lambda b_, h_, i: (b_, 0, 0))]
  dq = pl.pallas_call(
      functools.partial(_dq_kernel, st=st, has_seg=has_seg),
      grid=(b, h, tq // bq),
      in_specs=in_specs,
      out_specs=q_blk,
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      compiler_params=_compiler_params(st),
      interpret=st.interpret,
      name="rl_post_flash_bwd_dq",
  )(*args)
  return dq, dk, dv


_flash = bm.flash_vjp(_forward, _backward)


def flash_attention(q, k, v, *, causal=True, segment_ids=None,
                    sliding_window=None, block_sizes=None, interpret=False):
  """Pallas GPU flash attention; args and semantics as the public contract.

  block_sizes: `GpuBlockSizes` (default: `GpuBlockSizes.for_head_dim(D)`).
  """
  masking.validate_shapes(q, k, v, segment_ids, sliding_window)
  q_len, kv_len = q.shape[1], k.shape[1]
  blocks = block_sizes or GpuBlockSizes.for_head_dim(q.shape[-1])
  bm.check_blocks(**dataclasses.asdict(blocks))
  head_dim = q.shape[-1]
  st = _Static(causal=causal, sliding_window=sliding_window, q_len=q_len,
               kv_len=kv_len, blocks=blocks, interpret=bool(interpret),
               scale=1.0 / math.sqrt(head_dim))
  tq, tk = _padded_lengths(st)
  seg = None
  if segment_ids is not None:
    seg = bm.segment_operands(segment_ids, q_len, tq, tk)
  # Triton tiles need power-of-two sizes: zero head_dim padding changes no
  # score (the scale uses the true head_dim) and gives zero output columns.
  d_pad = pl.next_power_of_2(head_dim)
  pad = lambda x, t: bm.pad_to(bm.pad_to(x, 1, t), 3, d_pad)
  out = _flash(pad(q, tq), pad(k, tk), pad(v, tk), seg, st)
  return out[:, :q_len, :, :head_dim]
