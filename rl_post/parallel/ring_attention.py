"""Context parallelism: ring attention over a `context` mesh axis.

The sequence is split over the devices of one mesh axis. Each device keeps
its queries and passes its K/V block around the ring with `ppermute`; after
n steps every query has seen every key, and no device ever holds more than
two K/V blocks. Per step the local work is the chunked flash attention of
`rl_post.kernels.xla_attention` with explicit token positions, whose
partial outputs are merged through their log-sum-exps. The backward pass is
a second ring: dK/dV accumulators travel with their K/V block and arrive
home after n hops, while dQ stays local.

Causal load balancing: with a contiguous split, device 0 has almost nothing
to do and the last device does everything. The "zigzag" layout gives device
i the chunks i and 2n-1-i (of 2n), the "striped" layout gives it tokens
i, i+n, i+2n, ...; both give every device the same causal work. Callers lay
tokens out with `layout_permutation` (the model permutes its token ids,
positions and segment ids once, before the embedding) and undo it with
`inverse_permutation` on the outputs.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from rl_post.kernels import masking
from rl_post.kernels import xla_attention as xa

LAYOUTS = ("zigzag", "striped", "contiguous")


def zigzag_permutation(seq_len, n_shards):
  """Token order for the zig-zag layout: out[j] = original index at slot j.

  Shard i (slots [i*T/n, (i+1)*T/n)) holds chunks i and 2n-1-i of 2n equal
  chunks, so causal work is the same on every shard.
  """
  if seq_len % (2 * n_shards):
    raise ValueError(f"zigzag layout needs seq_len={seq_len} divisible by "
                     f"2 * n_shards = {2 * n_shards}")
  chunks = np.arange(seq_len).reshape(2 * n_shards, -1)
  order = [c for i in range(n_shards) for c in (i, 2 * n_shards - 1 - i)]
  return chunks[order].reshape(-1)


def striped_permutation(seq_len, n_shards):
  """Token order for the striped layout: shard i holds tokens i, i+n, ..."""
  if seq_len % n_shards:
    raise ValueError(f"striped layout needs seq_len={seq_len} divisible by "
                     f"n_shards={n_shards}")
  return np.arange(seq_len).reshape(-1, n_shards).T.reshape(-1)


def layout_permutation(layout, seq_len, n_shards):
  """Slot -> original token index for a layout in LAYOUTS (numpy int array)."""
  if layout == "zigzag":
    return zigzag_permutation(seq_len, n_shards)
  if layout == "striped":
    return striped_permutation(seq_len, n_shards)
  if layout == "contiguous":
    if seq_len % n_shards:
      raise ValueError(f"seq_len={seq_len} is not divisible by "
                       f"n_shards={n_shards}")
    return np.arange(seq_len)
  raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def inverse_permutation(perm):
  """inv with x[perm][inv] == x: takes laid-out tokens back to natural order."""
  perm = np.asarray(perm)
  inv = np.empty_like(perm)
  inv[perm] = np.arange(perm.size)
  return inv


def _merge(out, lse, out_s, lse_s):
  """Combines two partial softmax results by their log-sum-exps."""
  m = jnp.maximum(lse, lse_s)
  w, w_s = jnp.exp(lse - m), jnp.exp(lse_s - m)
  total = w + w_s
  out = (out * w[..., None] + out_s * w_s[..., None]) / total[..., None]
  return out, m + jnp.log(total)


def _ring_perm(n):
  return [(i, (i + 1) % n) for i in range(n)]


def _ring_fwd_impl(q, k, v, q_pos, q_seg, cfg, axis_name, n):
  acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
  k_seg0 = q_seg

  def step(_, carry):
    out, lse, k_c, v_c, kp_c, ks_c = carry
    # Send the current block on while it is being used (overlaps on device).
    nxt = lax.ppermute((k_c, v_c, kp_c, ks_c), axis_name, _ring_perm(n))
    pos = xa.Positions(q_pos, kp_c, q_seg, ks_c)
    out_s, lse_s = xa.attention_fwd(q, k_c, v_c, pos, cfg)
    out, lse = _merge(out, lse, out_s.astype(acc_dtype), lse_s)
    return (out, lse) + nxt

  init = (jnp.zeros(q.shape, acc_dtype),
          jnp.full(q.shape[:4], masking.NEG_INF, acc_dtype),
          k, v, q_pos, k_seg0)
  out, lse = lax.fori_loop(0, n, step, init)[:2]
  return out.astype(q.dtype), lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _ring(q, k, v, q_pos, q_seg, cfg, axis_name, n):
  return _ring_fwd_impl(q, k, v, q_pos, q_seg, cfg, axis_name, n)[0]


def _ring_fwd(q, k, v, q_pos, q_seg, cfg, axis_name, n):
  out, lse = _ring_fwd_impl(q, k, v, q_pos, q_seg, cfg, axis_name, n)
  return out, (q, k, v, q_pos, q_seg, out, lse)


def _ring_bwd(cfg, axis_name, n, res, do):
  q, k, v, q_pos, q_seg, out, lse = res
  acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
  delta = jnp.sum(do.astype(acc_dtype) * out.astype(acc_dtype), -1)

  def step(_, carry):
    dq, k_c, v_c, kp_c, ks_c, dk_c, dv_c = carry
    pos = xa.Positions(q_pos, kp_c, q_seg, ks_c)
    dq_s, dk_s, dv_s = xa.attention_bwd(q, k_c, v_c, pos, cfg, do, lse, delta)
    # dK/dV ride along with their block and are home after n hops.
    moved = lax.ppermute((k_c, v_c, kp_c, ks_c, dk_c + dk_s, dv_c + dv_s),
                         axis_name, _ring_perm(n))
    return (dq + dq_s,) + moved

  zeros_kv = jnp.zeros(k.shape, acc_dtype)
  init = (jnp.zeros(q.shape, acc_dtype), k, v, q_pos, q_seg, zeros_kv,
          zeros_kv)
  dq, _, _, _, _, dk, dv = lax.fori_loop(0, n, step, init)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_ring.defvjp(_ring_fwd, _ring_bwd)


def _local_block(local_len, layout):
  """A block size that keeps zig-zag chunks in separate blocks (for skipping)."""
  chunk = local_len // 2 if layout == "zigzag" else local_len
  block = math.gcd(chunk, xa.DEFAULT_BLOCK_Q)
  return block if block >= 64 else min(xa.DEFAULT_BLOCK_Q, local_len)


def _place(x, mesh, axis_name, spec):
  """Shards x as spec: `reshard` on Explicit mesh axes, a constraint on Auto."""
  sharding = NamedSharding(mesh, spec)
  axis_type = dict(zip(mesh.axis_names, mesh.axis_types))[axis_name]
  if axis_type == AxisType.Explicit:
    return jax.sharding.reshard(x, sharding)
  return lax.with_sharding_constraint(x, sharding)


def ring_attention(q, k, v, *, mesh, axis_name="context", causal=True,
                   segment_ids=None, sliding_window=None, layout="zigzag",
                   positions=None, batch_axis=None):
  """Self-attention with the sequence sharded over `axis_name`.

  Args:
    q: [B, T, H, D]; k, v: [B, T, Hkv, D] global arrays whose tokens are
      already in `layout` order (see `layout_permutation`); they are
      constrained to be sharded over T on `axis_name`.
    mesh: the `jax.sharding.Mesh` holding `axis_name`.
    causal, sliding_window: as `flash_attention`, on original positions.
    segment_ids: optional [B, T] ints, in layout order.
    layout: "zigzag" | "striped" | "contiguous"; fixes the token positions
      unless `positions` ([T] ints, layout order) is given.
    batch_axis: optional mesh axis (or tuple) that shards the batch.
  Returns:
    [B, T, H, D] in layout order, sharded like q.
  """
  masking.validate_shapes(q, k, v, segment_ids, sliding_window)
  n = mesh.shape[axis_name]
  seq_len = q.shape[1]
  if k.shape[1] != seq_len:
    raise ValueError("ring_attention is self-attention: q and k lengths "
                     f"differ ({seq_len} vs {k.shape[1]})")
  if positions is None:
    positions = layout_permutation(layout, seq_len, n)
  elif seq_len % n:
    raise ValueError(f"seq_len={seq_len} is not divisible by {n} shards")
  positions = jnp.asarray(positions, jnp.int32)
  cfg_block = _local_block(seq_len // n, layout)
  cfg = xa.BlockConfig(causal=causal, sliding_window=sliding_window,
                       block_q=cfg_block, block_k=cfg_block)
  x_spec = P(batch_axis, axis_name, None, None)
  seg_spec = P(batch_axis, axis_name)
  has_seg = segment_ids is not None

  def local(q, k, v, pos, *seg):
    q5, k4, v4 = xa.to_internal(q, k, v)
    out = _ring(q5, k4, v4, pos, seg[0] if has_seg else None, cfg, axis_name,
                n)
    return xa.from_internal(out)

  args = [q, k, v, positions] + ([segment_ids] if has_seg else [])
  specs = [x_spec, x_spec, x_spec, P(axis_name)] + ([seg_spec] if has_seg else [])
  # shard_map takes its inputs as laid out: put them on the ring first.
  args = [_place(a, mesh, axis_name, s) for a, s in zip(args, specs)]
  fn = jax.shard_map(local, mesh=mesh, in_specs=tuple(specs),
                     out_specs=x_spec, check_vma=False)
  return fn(*args)
