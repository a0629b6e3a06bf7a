"""Per-block flash-attention maths shared by the Pallas kernels.

Each function works on one [block_q, block_k] tile held in registers/VMEM:
the online-softmax update of the forward pass and the gradient of one tile
in the backward pass. Scores are always accumulated in float32.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from rl_post.kernels import masking


def matmul(a, b, *, trans_a=False, trans_b=False):
  """a @ b with optional transposes, float32 accumulation (MXU/tensor cores)."""
  contract_a = 0 if trans_a else 1
  contract_b = 1 if trans_b else 0
  return lax.dot_general(a, b, (((contract_a,), (contract_b,)), ((), ())),
                         preferred_element_type=jnp.float32)


def tile_mask(q_start, k_start, shape, *, causal, sliding_window, kv_len=None,
              q_seg=None, k_seg=None):
  """Allowed pairs of a tile whose first query/key sit at q_start/k_start.

  q_seg: [block_q, 1] and k_seg: [1, block_k] segment ids or None; kv_len
  masks padding keys at positions >= kv_len. Returns a bool array of `shape`
  or None when nothing is masked.
  """
  q_pos = q_start + lax.broadcasted_iota(jnp.int32, shape, 0)
  k_pos = k_start + lax.broadcasted_iota(jnp.int32, shape, 1)
  mask = masking.position_mask(q_pos, k_pos, causal=causal,
                               sliding_window=sliding_window)
  if kv_len is not None:
    mask = masking.combine(mask, k_pos < kv_len)
  if q_seg is not None:
    mask = masking.combine(mask, q_seg == k_seg)
  return mask


def online_softmax_step(q, k, v, carry, mask, scale):
  """Folds one KV tile into the running (max, sum, unnormalised output).

  q: [bq, D]; k, v: [bk, D]; carry: (m [bq, 1], l [bq, 1], acc [bq, D])
  float32. Row statistics stay 2-D ([bq, 1]) so the same code lowers to
  Triton and Mosaic without reshapes.
  """
  m, l, acc = carry
  s = matmul(q, k, trans_b=True) * scale
  if mask is not None:
    s = jnp.where(mask, s, masking.NEG_INF)
  m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
  p = jnp.exp(s - m_new)
  if mask is not None:
    p = jnp.where(mask, p, 0.0)
  alpha = jnp.exp(m - m_new)
  l = alpha * l + jnp.sum(p, axis=1, keepdims=True)
  acc = alpha * acc + matmul(p.astype(v.dtype), v)
  return m_new, l, acc


def finalize(m, l, acc):
  """(normalised output [bq, D], lse [bq, 1]); rows that saw no key give 0, NEG_INF."""
  seen = l > 0
  safe_l = jnp.where(seen, l, 1.0)
  out = acc / safe_l
  lse = jnp.where(seen, m + jnp.log(safe_l), masking.NEG_INF)
  return out, lse


def tile_grads(q, k, v, do, lse, delta, mask, scale):
  """Gradient pieces of one tile: (dq_part [bq, D], dk_part, dv_part [bk, D]).

  lse, delta: [bq, 1] float32 from the forward pass and sum(do * out, -1).
  """
  s = matmul(q, k, trans_b=True) * scale
  p = jnp.exp(s - lse)
  if mask is not None:
    p = jnp.where(mask, p, 0.0)
  dv = matmul(p.astype(do.dtype), do, trans_a=True)
  dp = matmul(do, v, trans_b=True)
  ds = (p * (dp - delta) * scale).astype(q.dtype)
  dk = matmul(ds, q, trans_a=True)
  dq = matmul(ds, k)
  return dq, dk, dv


def zero_carry(block_q, head_dim):
  return (jnp.full((block_q, 1), masking.NEG_INF, jnp.float32),
          jnp.zeros((block_q, 1), jnp.float32),
          jnp.zeros((block_q, head_dim), jnp.float32))


def kv_block_range(q_first, q_last, *, block_k, num_k_blocks, causal,
                   sliding_window):
  """[lo, hi) of KV blocks that queries at positions q_first..q_last can see."""
  hi = num_k_blocks
  if causal:
    hi = jnp.minimum(hi, lax.div(q_last, block_k) + 1)
  lo = 0
  if sliding_window is not None:
    lo = lax.div(jnp.maximum(q_first - sliding_window + 1, 0), block_k)
  return lo, hi


def q_block_range(k_first, k_last, *, offset, block_q, num_q_blocks, causal,
                  sliding_window):
  """[lo, hi) of query blocks (query t at position t + offset) seeing these keys."""
  lo = 0
  if causal:
    lo = lax.div(jnp.maximum(k_first - offset, 0), block_q)
  hi = num_q_blocks
  if sliding_window is not None:
    last_t = k_last + sliding_window - 1 - offset
    hi = jnp.where(last_t < 0, 0,
                   jnp.minimum(hi, lax.div(jnp.maximum(last_t, 0), block_q) + 1))
  return lo, hi


def pad_to(x, axis, size, value=0):
  """Pads axis of x at the end to `size`."""
  extra = size - x.shape[axis]
  if extra == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths, constant_values=value)


def round_up(n, m):
  return -(-n // m) * m


def segment_operands(segment_ids, q_len, padded_q, padded_k):
  """Kernel segment operands: q ids [B, Tq_pad, 1] and kv ids [B, 1, Tk_pad].

  Shaped as a column and a row so a tile's mask is one broadcast compare.
  Padding rows/keys get ids that match nothing real.
  """
  kv_len = segment_ids.shape[1]
  q_seg = pad_to(segment_ids[:, kv_len - q_len:], 1, padded_q, -1)
  k_seg = pad_to(segment_ids, 1, padded_k, -2)
  return q_seg[:, :, None], k_seg[:, None, :]


def check_blocks(**sizes):
  for name, size in sizes.items():
    if size < 1:
      raise ValueError(f"{name} must be positive, got {size}")




def flash_vjp(forward, backward):
  """The custom-VJP flash op shared by the GPU and TPU kernel families.

  Args:
    forward: `(q, k, v, seg, st) -> (out, lse)`.
    backward: `(q, k, v, seg, out, lse, do, st) -> (dq, dk, dv)`.
  Returns:
    `flash(q, k, v, seg, st) -> out`, differentiable in q, k, v; only the
    output and its log-sum-exp are saved for the backward pass.
  """

  @functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
  def flash(q, k, v, seg, st):
    return forward(q, k, v, seg, st)[0]

  def flash_fwd(q, k, v, seg, st):
    out, lse = forward(q, k, v, seg, st)
    return out, (q, k, v, seg, out, lse)

  def flash_bwd(st, res, do):
    q, k, v, seg, out, lse = res
    dq, dk, dv = backward(q, k, v, seg, out, lse, do, st)
    return dq, dk, dv, None if seg is None else (None, None)

  flash.defvjp(flash_fwd, flash_bwd)
  return flash
