"""Memory-efficient attention in plain XLA: the fallback for every backend.

Flash attention written with `lax` loops instead of a kernel language: the
forward pass walks KV blocks with an online softmax and saves only the output
and the per-row log-sum-exp (LSE); the backward pass (a `jax.custom_vjp`)
recomputes each score block from the LSE. Memory is O(sequence) and blocks
that the causal mask, the sliding window or the segment ids prove empty are
skipped, so causal attention costs about half of the dense FLOPs.

The core (`attention_fwd`, `attention_bwd`) takes explicit token positions,
so ring attention reuses it for zig-zag or striped shards.

Internal layout: q [B, Hkv, G, T, D] (G = query heads per KV head, so GQA
never repeats K/V), k and v [B, Hkv, S, D].
"""

import dataclasses
import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from rl_post.kernels import masking

DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 256


@dataclasses.dataclass(frozen=True)
class BlockConfig:
  """Static settings of the chunked computation."""
  causal: bool = True
  sliding_window: Optional[int] = None
  block_q: int = DEFAULT_BLOCK_Q
  block_k: int = DEFAULT_BLOCK_K


class Positions(NamedTuple):
  """Where each query/key sits; the masks are functions of these only.

  q_pos [T] and k_pos [S] int32 absolute positions; q_seg [B, T] and
  k_seg [B, S] segment ids or None; k_valid [S] bool or None (False for
  padding keys).
  """
  q_pos: jax.Array
  k_pos: jax.Array
  q_seg: Optional[jax.Array] = None
  k_seg: Optional[jax.Array] = None
  k_valid: Optional[jax.Array] = None


def _pad_axis(x, axis, size, mode="edge"):
  pad = size - x.shape[axis]
  if pad == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  if mode == "edge":
    return jnp.pad(x, widths, mode="edge")
  return jnp.pad(x, widths, constant_values=mode)


def _round_up(n, m):
  return -(-n // m) * m


def _pad_inputs(q, k, v, pos, cfg):
  """Pads T and S up to block multiples; padding keys are marked invalid."""
  t, s = q.shape[3], k.shape[2]
  bq, bk = min(cfg.block_q, t), min(cfg.block_k, s)
  tp, sp = _round_up(t, bq), _round_up(s, bk)
  k_valid = pos.k_valid
  if sp != s and k_valid is None:
    k_valid = jnp.ones((s,), bool)
  padded = Positions(
      q_pos=_pad_axis(pos.q_pos, 0, tp),
      k_pos=_pad_axis(pos.k_pos, 0, sp),
      q_seg=None if pos.q_seg is None else _pad_axis(pos.q_seg, 1, tp),
      k_seg=None if pos.k_seg is None else _pad_axis(pos.k_seg, 1, sp),
      k_valid=None if k_valid is None else _pad_axis(k_valid, 0, sp, False))
  q = _pad_axis(q, 3, tp, 0)
  k = _pad_axis(k, 2, sp, 0)
  v = _pad_axis(v, 2, sp, 0)
  return q, k, v, padded, bq, bk


def _block_ranges(x, block, axis=-1):
  """Per-block (min, max) of x along its last axis: [..., n_blocks] each."""
  xb = x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))
  return xb.min(-1), xb.max(-1)


class _Plan(NamedTuple):
  """Block-level liveness: which (q block, k block) pairs need computing."""
  q_rng: tuple
  k_rng: tuple
  qs_rng: Optional[tuple]
  ks_rng: Optional[tuple]
  k_any: Optional[jax.Array]


def _plan(pos, bq, bk):
  return _Plan(
      q_rng=_block_ranges(pos.q_pos, bq),
      k_rng=_block_ranges(pos.k_pos, bk),
      qs_rng=None if pos.q_seg is None else _block_ranges(pos.q_seg, bq),
      ks_rng=None if pos.k_seg is None else _block_ranges(pos.k_seg, bk),
      k_any=None if pos.k_valid is None
      else pos.k_valid.reshape(-1, bk).any(-1))


def _live(plan, i, j, cfg):
  live = masking.block_is_live(
      plan.q_rng[0][i], plan.q_rng[1][i], plan.k_rng[0][j], plan.k_rng[1][j],
      causal=cfg.causal, sliding_window=cfg.sliding_window)
  if plan.qs_rng is not None:
    # Segment id ranges that do not overlap cannot share a segment (any row).
    q_lo, q_hi = plan.qs_rng[0][:, i], plan.qs_rng[1][:, i]
    k_lo, k_hi = plan.ks_rng[0][:, j], plan.ks_rng[1][:, j]
    live &= jnp.any((q_lo <= k_hi) & (k_lo <= q_hi))
  if plan.k_any is not None:
    live &= plan.k_any[j]
  return live


def _block_mask(pos, i, j, bq, bk, cfg):
  """[B|1, 1, 1, bq, bk] mask for block (i, j), or None if nothing masks."""
  qp = lax.dynamic_slice_in_dim(pos.q_pos, i * bq, bq)
  kp = lax.dynamic_slice_in_dim(pos.k_pos, j * bk, bk)
  mask = masking.position_mask(qp[:, None], kp[None, :], causal=cfg.causal,
                               sliding_window=cfg.sliding_window)
  if pos.k_valid is not None:
    valid = lax.dynamic_slice_in_dim(pos.k_valid, j * bk, bk)[None, :]
    mask = masking.combine(mask, valid)
  if mask is not None:
    mask = mask[None]
  if pos.q_seg is not None:
    qs = lax.dynamic_slice_in_dim(pos.q_seg, i * bq, bq, axis=1)
    ks = lax.dynamic_slice_in_dim(pos.k_seg, j * bk, bk, axis=1)
    mask = masking.combine(mask, qs[:, :, None] == ks[:, None, :])
  return None if mask is None else mask[:, None, None]


def _acc_dtype(dtype):
  """float32 accumulation, or float64 when the inputs are float64."""
  return jnp.promote_types(dtype, jnp.float32)


def _tie(q, pos):
  """Makes the masks depend on q, so they are never hoisted out of loops.

  Inside a differentiated `lax.scan` (the model's layer loop), JAX moves
  loop-invariant work out of the loop body and keeps its results for every
  inner iteration. Masks depend only on positions, so without this the
  [q blocks, k blocks, bq, bk] mask stack -- quadratic memory -- is saved.
  """
  return lax.optimization_barrier((q, pos))


def _dot(spec, a, b):
  return jnp.einsum(spec, a, b, preferred_element_type=_acc_dtype(a.dtype))


def attention_fwd(q, k, v, pos, cfg):
  """Chunked forward pass.

  Args:
    q: [B, Hkv, G, T, D]; k, v: [B, Hkv, S, D]; pos: `Positions`;
    cfg: `BlockConfig`.
  Returns:
    (out [B, Hkv, G, T, D] in q's dtype, lse [B, Hkv, G, T] float32 (or
    float64), with
    masking.NEG_INF on rows that see no key).
  """
  t, d = q.shape[3], q.shape[4]
  q, pos = _tie(q, pos)
  q, k, v, pos, bq, bk = _pad_inputs(q, k, v, pos, cfg)
  nq, nk = q.shape[3] // bq, k.shape[2] // bk
  plan = _plan(pos, bq, bk)
  scale = 1.0 / math.sqrt(d)
  stat_shape = q.shape[:3] + (bq,)

  def q_block(i):
    q_i = lax.dynamic_slice_in_dim(q, i * bq, bq, axis=3)

    def kv_step(j, carry):
      def compute(carry):
        m, l, acc = carry
        k_j = lax.dynamic_slice_in_dim(k, j * bk, bk, axis=2)
        v_j = lax.dynamic_slice_in_dim(v, j * bk, bk, axis=2)
        s = _dot("bkgqd,bksd->bkgqs", q_i, k_j) * scale
        mask = _block_mask(pos, i, j, bq, bk, cfg)
        if mask is not None:
          s = jnp.where(mask, s, masking.NEG_INF)
        m_new = jnp.maximum(m, s.max(-1))
        p = jnp.exp(s - m_new[..., None])
        if mask is not None:
          p = jnp.where(mask, p, 0.0)
        alpha = jnp.exp(m - m_new)
        l = alpha * l + p.sum(-1)
        acc = alpha[..., None] * acc + _dot("bkgqs,bksd->bkgqd",
                                            p.astype(v.dtype), v_j)
        return m_new, l, acc
      return lax.cond(_live(plan, i, j, cfg), compute, lambda c: c, carry)

    acc_dtype = _acc_dtype(q.dtype)
    init = (jnp.full(stat_shape, masking.NEG_INF, acc_dtype),
            jnp.zeros(stat_shape, acc_dtype),
            jnp.zeros(stat_shape + (d,), acc_dtype))
    m, l, acc = lax.fori_loop(0, nk, kv_step, init)
    seen = l > 0
    out = acc / jnp.where(seen, l, 1.0)[..., None]
    lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), masking.NEG_INF)
    return out.astype(q.dtype), lse

  out_blocks, lse_blocks = lax.map(q_block, jnp.arange(nq))
  # [nq, B, K, G, bq, ...] -> [B, K, G, nq * bq, ...]
  out = jnp.moveaxis(out_blocks, 0, 3).reshape(q.shape)[:, :, :, :t]
  lse = jnp.moveaxis(lse_blocks, 0, 3).reshape(q.shape[:4])[..., :t]
  return out, lse


def attention_bwd(q, k, v, pos, cfg, do, lse, delta):
  """Chunked backward pass from the saved LSE.

  Args:
    q, k, v, pos, cfg: as in `attention_fwd`.
    do: [B, Hkv, G, T, D] output cotangent; lse: [B, Hkv, G, T] from the
    forward; delta: [B, Hkv, G, T] = sum(do * out, -1) in float32.
  Returns:
    (dq, dk, dv) in float32 (float64 for float64 inputs), shaped like q, k, v.
  """
  t, s_len, d = q.shape[3], k.shape[2], q.shape[4]
  q, pos = _tie(q, pos)
  q, k, v, pos, bq, bk = _pad_inputs(q, k, v, pos, cfg)
  tp = q.shape[3]
  do = _pad_axis(do, 3, tp, 0)
  lse = _pad_axis(lse, 3, tp, 0)
  delta = _pad_axis(delta, 3, tp, 0)
  nq, nk = tp // bq, k.shape[2] // bk
  plan = _plan(pos, bq, bk)
  scale = 1.0 / math.sqrt(d)
  kv_blk_shape = k.shape[:2] + (bk, d)
  acc_dtype = _acc_dtype(q.dtype)

  def kv_block(j, carry):
    dq, dk, dv = carry
    k_j = lax.dynamic_slice_in_dim(k, j * bk, bk, axis=2)
    v_j = lax.dynamic_slice_in_dim(v, j * bk, bk, axis=2)

    def q_step(i, c):
      def compute(c):
        dq, dk_j, dv_j = c
        q_i = lax.dynamic_slice_in_dim(q, i * bq, bq, axis=3)
        do_i = lax.dynamic_slice_in_dim(do, i * bq, bq, axis=3)
        lse_i = lax.dynamic_slice_in_dim(lse, i * bq, bq, axis=3)
        delta_i = lax.dynamic_slice_in_dim(delta, i * bq, bq, axis=3)
        s = _dot("bkgqd,bksd->bkgqs", q_i, k_j) * scale
        p = jnp.exp(s - lse_i[..., None])
        mask = _block_mask(pos, i, j, bq, bk, cfg)
        if mask is not None:
          p = jnp.where(mask, p, 0.0)
        dv_j = dv_j + _dot("bkgqs,bkgqd->bksd", p.astype(do.dtype), do_i)
        dp = _dot("bkgqd,bksd->bkgqs", do_i, v_j)
        ds = (p * (dp - delta_i[..., None]) * scale).astype(q.dtype)
        dk_j = dk_j + _dot("bkgqs,bkgqd->bksd", ds, q_i)
        dq_i = lax.dynamic_slice_in_dim(dq, i * bq, bq, axis=3)
        dq_i = dq_i + _dot("bkgqs,bksd->bkgqd", ds, k_j)
        dq = lax.dynamic_update_slice_in_dim(dq, dq_i, i * bq, axis=3)
        return dq, dk_j, dv_j
      return lax.cond(_live(plan, i, j, cfg), compute, lambda c: c, c)

    zeros = jnp.zeros(kv_blk_shape, acc_dtype)
    dq, dk_j, dv_j = lax.fori_loop(0, nq, q_step, (dq, zeros, zeros))
    dk = lax.dynamic_update_slice_in_dim(dk, dk_j, j * bk, axis=2)
    dv = lax.dynamic_update_slice_in_dim(dv, dv_j, j * bk, axis=2)
    return dq, dk, dv

  init = (jnp.zeros(q.shape, acc_dtype), jnp.zeros(k.shape, acc_dtype),
          jnp.zeros(v.shape, acc_dtype))
  dq, dk, dv = lax.fori_loop(0, nk, kv_block, init)
  return dq[:, :, :, :t], dk[:, :, :s_len], dv[:, :, :s_len]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, pos, cfg):
  return attention_fwd(q, k, v, pos, cfg)[0]


def _flash_fwd(q, k, v, pos, cfg):
  out, lse = attention_fwd(q, k, v, pos, cfg)
  return out, (q, k, v, pos, out, lse)


def _flash_bwd(cfg, res, do):
  q, k, v, pos, out, lse = res
  acc_dtype = _acc_dtype(out.dtype)
  delta = jnp.sum(do.astype(acc_dtype) * out.astype(acc_dtype), -1)
  dq, dk, dv = attention_bwd(q, k, v, pos, cfg, do, lse, delta)
  zero_pos = jax.tree.map(lambda _: None, pos)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), zero_pos


_flash.defvjp(_flash_fwd, _flash_bwd)


def to_internal(q, k, v):
  """[B, T, H, D] and [B, S, Hkv, D] -> [B, Hkv, G, T, D] and [B, Hkv, S, D]."""
  b, t, h, d = q.shape
  h_kv = k.shape[2]
  q5 = q.reshape(b, t, h_kv, h // h_kv, d).transpose(0, 2, 3, 1, 4)
  return q5, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def from_internal(out5):
  """[B, Hkv, G, T, D] -> [B, T, H, D]."""
  b, h_kv, g, t, d = out5.shape
  return out5.transpose(0, 3, 1, 2, 4).reshape(b, t, h_kv * g, d)


def aligned_positions(q_len, kv_len, segment_ids=None):
  """Positions for queries aligned to the end of the keys (the contract)."""
  return Positions(
      q_pos=jnp.arange(q_len, dtype=jnp.int32) + (kv_len - q_len),
      k_pos=jnp.arange(kv_len, dtype=jnp.int32),
      q_seg=None if segment_ids is None else segment_ids[:, kv_len - q_len:],
      k_seg=segment_ids)


def xla_flash_attention(q, k, v, *, causal=True, segment_ids=None,
                        sliding_window=None, block_q=DEFAULT_BLOCK_Q,
                        block_k=DEFAULT_BLOCK_K):
  """Chunked attention, O(sequence) memory, flash-style custom backward.

  Args and semantics as `rl_post.kernels.attention.flash_attention`.
  """
  masking.validate_shapes(q, k, v, segment_ids, sliding_window)
  cfg = BlockConfig(causal=causal, sliding_window=sliding_window,
                    block_q=block_q, block_k=block_k)
  pos = aligned_positions(q.shape[1], k.shape[1], segment_ids)
  q5, k4, v4 = to_internal(q, k, v)
  return from_internal(_flash(q5, k4, v4, pos, cfg))


def xla_decode_attention(q, k_cache, v_cache, lengths):
  """One-query attention over a ragged cache; memory O(cache) like the cache.

  Written as broadcast-multiply-reduce over the cache in its stored
  [B, S, Hkv, D] layout: a dot_general with (batch, kv head) batch dims
  would make XLA transpose both caches (a full copy per layer per decode
  step); the reductions read each cache once.

  Args:
    q: [B, H, D]; k_cache, v_cache: [B, S, Hkv, D]; lengths: [B] int.
  Returns:
    [B, H, D]; rows with length 0 are zeros.
  """
  b, h, d = q.shape
  s, h_kv = k_cache.shape[1], k_cache.shape[2]
  acc = _acc_dtype(q.dtype)
  q_Bx1xKxGxD = q.reshape(b, 1, h_kv, h // h_kv, d).astype(acc)
  scores_BxSxKxG = jnp.sum(q_Bx1xKxGxD * k_cache[:, :, :, None, :].astype(acc),
                           axis=-1) / math.sqrt(d)
  valid = (jnp.arange(s)[None, :] < lengths[:, None])[:, :, None, None]
  scores_BxSxKxG = jnp.where(valid, scores_BxSxKxG, masking.NEG_INF)
  m = scores_BxSxKxG.max(1, keepdims=True)
  p = jnp.where(valid, jnp.exp(scores_BxSxKxG - m), 0.0)
  denom = p.sum(1, keepdims=True)
  p = p / jnp.where(denom > 0, denom, 1.0)
  out_BxKxGxD = jnp.sum(p[..., None] * v_cache[:, :, :, None, :].astype(acc), axis=1)
  return out_BxKxGxD.reshape(b, h, d).astype(q.dtype)


def xla_decode_attention_transposed(q, k_BxKxDxS, v_BxKxSxD, lengths):
  """`xla_decode_attention` over the "transposed" cache layout.

  k is stored [B, Hkv, D, S] and v [B, Hkv, S, D] (`rl_post.models.kv_cache`),
  so both products are batched matmuls over (row, kv head) whose operands
  are already in matmul order: no copy of either cache, and the score
  reduction runs over D, which is not the minor axis.

  Args:
    q: [B, H, D]; k_BxKxDxS, v_BxKxSxD: the caches; lengths: [B] int.
  Returns:
    [B, H, D]; rows with length 0 are zeros.
  """
  b, h, d = q.shape
  h_kv, s = k_BxKxDxS.shape[1], k_BxKxDxS.shape[3]
  # products in the cache's dtype accumulated in f32 (a bf16 cache is never
  # converted as a whole); probabilities rounded to it, as in attention_fwd
  q_BxKxGxD = q.reshape(b, h_kv, h // h_kv, d).astype(k_BxKxDxS.dtype)
  scores_BxKxGxS = _dot("bkgd,bkds->bkgs", q_BxKxGxD, k_BxKxDxS) / math.sqrt(d)
  valid = (jnp.arange(s)[None, :] < lengths[:, None])[:, None, None, :]
  scores_BxKxGxS = jnp.where(valid, scores_BxKxGxS, masking.NEG_INF)
  m = scores_BxKxGxS.max(-1, keepdims=True)
  p = jnp.where(valid, jnp.exp(scores_BxKxGxS - m), 0.0)
  denom = p.sum(-1, keepdims=True)
  p = p / jnp.where(denom > 0, denom, 1.0)
  out_BxKxGxD = _dot("bkgs,bksd->bkgd", p.astype(v_BxKxSxD.dtype), v_BxKxSxD)
  return out_BxKxGxD.reshape(b, h, d).astype(q.dtype)
