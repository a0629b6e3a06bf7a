"""Flash attention for TPUs in Pallas (Mosaic lowering): forward and backward.

The KV (or, for dK/dV, the query) loop is the innermost grid axis, marked
"arbitrary", so Mosaic's pipeline double-buffers the HBM->VMEM copies of the
next tile while the MXU works on the current one; running statistics live in
VMEM scratch across those grid steps:
  forward:  grid (B, H, q blocks, kv blocks);
  dK/dV:    grid (B, Hkv, kv blocks, G, q blocks): the G query heads of a
            KV head accumulate into one dK/dV tile (GQA without repeats);
  dQ:       grid (B, H, q blocks, kv blocks).
Tiles proved dead by the causal mask or the window are skipped with
`pl.when`, and their K/V index is clamped to the last live tile so the
pipeline does not fetch them at all. Inputs are laid out [B, H, T, D] so
each tile is a (block, head_dim) slab that satisfies Mosaic's (8, 128)
tiling.
"""

import dataclasses
import functools
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from rl_post.kernels import block_math as bm
from rl_post.kernels import masking


@dataclasses.dataclass(frozen=True)
class TpuBlockSizes:
  """Tile sizes: multiples of 128 on hardware (any size in interpret mode)."""
  block_q: int = 512
  block_k: int = 512
  block_q_bwd: int = 256
  block_k_bwd: int = 512


@dataclasses.dataclass(frozen=True)
class _Static:
  causal: bool
  sliding_window: Optional[int]
  q_len: int
  kv_len: int
  blocks: TpuBlockSizes
  interpret: Any

  @property
  def offset(self):
    return self.kv_len - self.q_len


def _tile_live(st, q_first, bq, k_first, bk):
  live = masking.block_is_live(q_first, q_first + bq - 1, k_first,
                               k_first + bk - 1, causal=st.causal,
                               sliding_window=st.sliding_window)
  return live & (k_first < st.kv_len)


def _last_live_k(st, i, bq, bk, nk):
  """Index of the last KV tile query tile i needs (for DMA clamping)."""
  if not st.causal:
    return nk - 1
  return jnp.minimum(lax.div(st.offset + i * bq + bq - 1, bk), nk - 1)


def _first_live_q(st, j, bq, bk, i):
  """max(i, first query tile that KV tile j is visible to) (DMA clamping)."""
  if not st.causal:
    return i
  return jnp.maximum(i, lax.div(jnp.maximum(j * bk - st.offset, 0), bq))


def _tile_mask(st, q_first, k_first, bq, bk, seg_refs):
  q_seg = k_seg = None
  if seg_refs:
    q_seg, k_seg = seg_refs[0][...], seg_refs[1][...]
  return bm.tile_mask(q_first, k_first, (bq, bk), causal=st.causal,
                      sliding_window=st.sliding_window, kv_len=st.kv_len,
                      q_seg=q_seg, k_seg=k_seg)


def _fwd_kernel(*refs, st, has_seg):
  q_ref, k_ref, v_ref = refs[:3]
  seg_refs = refs[3:5] if has_seg else ()
  o_ref, lse_ref, m_sc, l_sc, acc_sc = refs[3 + 2 * has_seg:]
  bq, bk = st.blocks.block_q, st.blocks.block_k
  i, j = pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _init():
    m_sc[...], l_sc[...], acc_sc[...] = bm.zero_carry(bq, acc_sc.shape[-1])

  q_first, k_first = st.offset + i * bq, j * bk

  @pl.when(_tile_live(st, q_first, bq, k_first, bk))
  def _compute():
    mask = _tile_mask(st, q_first, k_first, bq, bk, seg_refs)
    m, l, acc = bm.online_softmax_step(
        q_ref[...], k_ref[...], v_ref[...], (m_sc[...], l_sc[...], acc_sc[...]),
        mask, 1.0 / math.sqrt(q_ref.shape[-1]))
    m_sc[...], l_sc[...], acc_sc[...] = m, l, acc

  @pl.when(j == pl.num_programs(3) - 1)
  def _finish():
    out, lse = bm.finalize(m_sc[...], l_sc[...], acc_sc[...])
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse


def _dkv_kernel(*refs, st, has_seg):
  q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
  seg_refs = refs[6:8] if has_seg else ()
  dk_ref, dv_ref, dk_sc, dv_sc = refs[6 + 2 * has_seg:]
  bq, bk = st.blocks.block_q_bwd, st.blocks.block_k_bwd
  j, g, i = pl.program_id(2), pl.program_id(3), pl.program_id(4)
  first_step = (g == 0) & (i == 0)
  last_step = ((g == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))

  @pl.when(first_step)
  def _init():
    dk_sc[...] = jnp.zeros(dk_sc.shape, jnp.float32)
    dv_sc[...] = jnp.zeros(dv_sc.shape, jnp.float32)

  q_first, k_first = st.offset + i * bq, j * bk
  live = _tile_live(st, q_first, bq, k_first, bk) & (i * bq < st.q_len)

  @pl.when(live)
  def _compute():
    mask = _tile_mask(st, q_first, k_first, bq, bk, seg_refs)
    _, dk, dv = bm.tile_grads(q_ref[...], k_ref[...], v_ref[...], do_ref[...],
                              lse_ref[...], delta_ref[...], mask,
                              1.0 / math.sqrt(q_ref.shape[-1]))
    dk_sc[...] += dk
    dv_sc[...] += dv

  @pl.when(last_step)
  def _finish():
    dk_ref[...] = dk_sc[...].astype(dk_ref.dtype)
    dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)


def _dq_kernel(*refs, st, has_seg):
  q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = refs[:6]
  seg_refs = refs[6:8] if has_seg else ()
  dq_ref, dq_sc = refs[6 + 2 * has_seg:]
  bq, bk = st.blocks.block_q_bwd, st.blocks.block_k_bwd
  i, j = pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _init():
    dq_sc[...] = jnp.zeros(dq_sc.shape, jnp.float32)

  q_first, k_first = st.offset + i * bq, j * bk

  @pl.when(_tile_live(st, q_first, bq, k_first, bk))
  def _compute():
    mask = _tile_mask(st, q_first, k_first, bq, bk, seg_refs)
    dq, _, _ = bm.tile_grads(q_ref[...], k_ref[...], v_ref[...], do_ref[...],
                             lse_ref[...], delta_ref[...], mask,
                             1.0 / math.sqrt(q_ref.shape[-1]))
    dq_sc[...] += dq

  @pl.when(j == pl.num_programs(3) - 1)
  def _finish():
    dq_ref[...] = dq_sc[...].astype(dq_ref.dtype)


def _params(interpret, n_parallel, n_arbitrary):
  sem = ("parallel",) * n_parallel + ("arbitrary",) * n_arbitrary
  return dict(compiler_params=pltpu.CompilerParams(dimension_semantics=sem),
              interpret=interpret)


def _forward(q, k, v, seg, st):
  """q [B, H, Tp, D], k/v [B, Hkv, Sp, D] -> (out, lse [B, H, Tp, 1])."""
  b, h, tq, d = q.shape
  h_kv, tk = k.shape[1], k.shape[2]
  group = h // h_kv
  bq, bk = st.blocks.block_q, st.blocks.block_k
  nk = tk // bk

  def kv_index(b_, h_, i, j):
    return (b_, h_ // group, jnp.minimum(j, _last_live_k(st, i, bq, bk, nk)), 0)

  q_spec = pl.BlockSpec((None, None, bq, d), lambda b_, h_, i, j: (b_, h_, i, 0))
  kv_spec = pl.BlockSpec((None, None, bk, d), kv_index)
  in_specs, args = [q_spec, kv_spec, kv_spec], [q, k, v]
  if seg is not None:
    in_specs += [pl.BlockSpec((None, bq, 1), lambda b_, h_, i, j: (b_, i, 0)),
                 pl.BlockSpec((None, 1, bk), lambda b_, h_, i, j: (b_, 0, j))]
    args += list(seg)
  return pl.pallas_call(
      functools.partial(_fwd_kernel, st=st, has_seg=seg is not None),
      grid=(b, h, tq // bq, nk),
      in_specs=in_specs,
      out_specs=[q_spec,
                 pl.BlockSpec((None, None, bq, 1),
                              lambda b_, h_, i, j: (b_, h_, i, 0))],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, tq, 1), jnp.float32)],
      scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32),
                      pltpu.VMEM((bq, 1), jnp.float32),
                      pltpu.VMEM((bq, d), jnp.float32)],
      name="rl_post_flash_fwd_tpu",
      **_params(st.interpret, 3, 1),
  )(*args)


def _backward(q, k, v, seg, out, lse, do, st):
  b, h, tq, d = q.shape
  h_kv, tk = k.shape[1], k.shape[2]
  group = h // h_kv
  bq, bk = st.blocks.block_q_bwd, st.blocks.block_k_bwd
  delta = jnp.sum(out.astype(jnp.float32) * do.astype(jnp.float32), axis=-1,
                  keepdims=True)
  has_seg = seg is not None

  # dK, dV: grid (B, Hkv, kv blocks, G, q blocks). Query tiles before the
  # first one that sees KV tile j are clamped to it: no DMA for dead tiles.
  def q_index(b_, kh, j, g, i):
    return (b_, kh * group + g, _first_live_q(st, j, bq, bk, i), 0)

  q_spec = pl.BlockSpec((None, None, bq, d), q_index)
  st_spec = pl.BlockSpec((None, None, bq, 1), q_index)
  kv_spec = pl.BlockSpec((None, None, bk, d), lambda b_, kh, j, g, i: (b_, kh, j, 0))
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, st_spec, st_spec]
  args = [q, k, v, do, lse, delta]
  if has_seg:
    in_specs += [pl.BlockSpec((None, bq, 1), lambda b_, kh, j, g, i: (
        b_, _first_live_q(st, j, bq, bk, i), 0)),
                 pl.BlockSpec((None, 1, bk), lambda b_, kh, j, g, i: (b_, 0, j))]
    args += list(seg)
  dk, dv = pl.pallas_call(
      functools.partial(_dkv_kernel, st=st, has_seg=has_seg),
      grid=(b, h_kv, tk // bk, group, tq // bq),
      in_specs=in_specs,
      out_specs=[kv_spec, kv_spec],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                 jax.ShapeDtypeStruct(v.shape, v.dtype)],
      scratch_shapes=[pltpu.VMEM((bk, d), jnp.float32),
                      pltpu.VMEM((bk, d), jnp.float32)],
      name="rl_post_flash_bwd_dkv_tpu",
      **_params(st.interpret, 3, 2),
  )(*args)

  # dQ: grid (B, H, q blocks, kv blocks).
  nk = tk // bk

  def kv_index(b_, h_, i, j):
    return (b_, h_ // group, jnp.minimum(j, _last_live_k(st, i, bq, bk, nk)), 0)

  q_spec = pl.BlockSpec((None, None, bq, d), lambda b_, h_, i, j: (b_, h_, i, 0))
  st_spec = pl.BlockSpec((None, None, bq, 1), lambda b_, h_, i, j: (b_, h_, i, 0))
  kv_spec = pl.BlockSpec((None, None, bk, d), kv_index)
  in_specs = [q_spec, kv_spec, kv_spec, q_spec, st_spec, st_spec]
  if has_seg:
    in_specs += [pl.BlockSpec((None, bq, 1), lambda b_, h_, i, j: (b_, i, 0)),
                 pl.BlockSpec((None, 1, bk), lambda b_, h_, i, j: (b_, 0, j))]
  dq = pl.pallas_call(
      functools.partial(_dq_kernel, st=st, has_seg=has_seg),
      grid=(b, h, tq // bq, nk),
      in_specs=in_specs,
      out_specs=q_spec,
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      scratch_shapes=[pltpu.VMEM((bq, d), jnp.float32)],
      name="rl_post_flash_bwd_dq_tpu",
      **_params(st.interpret, 3, 1),
  )(*args)
  return dq, dk, dv


_flash = bm.flash_vjp(_forward, _backward)


def flash_attention(q, k, v, *, causal=True, segment_ids=None,
                    sliding_window=None, block_sizes=None, interpret=False):
  """Pallas TPU flash attention; args and semantics as the public contract.

  interpret: False on TPU; True or a `pltpu.InterpretParams` to run the
  kernel on CPU (the latter simulates VMEM/HBM and can flag uninitialised
  or out-of-bounds reads and races).
  """
  masking.validate_shapes(q, k, v, segment_ids, sliding_window)
  q_len, kv_len = q.shape[1], k.shape[1]
  blocks = block_sizes or TpuBlockSizes()
  bm.check_blocks(**dataclasses.asdict(blocks))
  # Small inputs: shrink tiles rather than pad a 100-token call to 512.
  blocks = TpuBlockSizes(*(min(x, bm.round_up(n, 8)) for x, n in zip(
      dataclasses.astuple(blocks), (q_len, kv_len, q_len, kv_len))))
  st = _Static(causal=causal, sliding_window=sliding_window, q_len=q_len,
               kv_len=kv_len, blocks=blocks, interpret=interpret)
  tq = bm.round_up(q_len, math.lcm(blocks.block_q, blocks.block_q_bwd))
  tk = bm.round_up(kv_len, math.lcm(blocks.block_k, blocks.block_k_bwd))
  seg = None
  if segment_ids is not None:
    seg = bm.segment_operands(segment_ids, q_len, tq, tk)
  to_bhtd = lambda x, n: bm.pad_to(x, 1, n).transpose(0, 2, 1, 3)
  out = _flash(to_bhtd(q, tq), to_bhtd(k, tk), to_bhtd(v, tk), seg, st)
  return out.transpose(0, 2, 1, 3)[:, :q_len]
