"""Attention masks as functions of token positions, shared by every kernel.

Every implementation (XLA chunked, Pallas GPU, Pallas TPU, ring attention)
builds its masks from absolute token positions with these helpers, so the
semantics live in one place. Shapes broadcast: pass q positions as [..., Q, 1]
and key positions as [..., 1, K] to get a [..., Q, K] mask.
"""

import jax.numpy as jnp

# Finite "minus infinity": a fully masked row then gives exp(NEG_INF - NEG_INF)
# = 1 instead of NaN; kernels zero such rows explicitly.
NEG_INF = -1e30


def position_mask(q_pos, k_pos, *, causal, sliding_window):
  """Boolean mask of allowed pairs from positions; None when nothing is masked."""
  mask = None
  if causal:
    mask = k_pos <= q_pos
  if sliding_window is not None:
    in_window = q_pos - k_pos < sliding_window
    mask = in_window if mask is None else mask & in_window
  return mask


def combine(*masks):
  """Logical AND of the masks that are not None (None when all are)."""
  out = None
  for m in masks:
    if m is not None:
      out = m if out is None else out & m
  return out


def block_is_live(q_min, q_max, k_min, k_max, *, causal, sliding_window):
  """False when position ranges prove a (q block, k block) pair fully masked.

  Conservative: True means "may have allowed pairs". Works for any positions,
  not only contiguous ones (ring attention's zig-zag chunks included).
  """
  live = jnp.bool_(True)
  if causal:
    live &= k_min <= q_max
  if sliding_window is not None:
    live &= q_min - k_max < sliding_window
  return live


def validate_shapes(q, k, v, segment_ids=None, sliding_window=None):
  """Raises ValueError with a clear message for inconsistent attention inputs."""
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError(
        "attention expects q [B, Tq, H, D] and k, v [B, Tk, Hkv, D]; got "
        f"q{q.shape} k{k.shape} v{v.shape}")
  if k.shape != v.shape:
    raise ValueError(f"k and v shapes differ: k{k.shape} v{v.shape}")
  b, q_len, h, d = q.shape
  if k.shape[0] != b or k.shape[3] != d:
    raise ValueError(
        f"batch/head_dim of q{q.shape} and k{k.shape} do not match")
  if h % k.shape[2]:
    raise ValueError(
        f"num_heads={h} is not a multiple of num_kv_heads={k.shape[2]}")
  if q_len > k.shape[1]:
    raise ValueError(
        f"q_len={q_len} exceeds kv_len={k.shape[1]}: queries are aligned to "
        "the end of the keys")
  if segment_ids is not None and segment_ids.shape != (b, k.shape[1]):
    raise ValueError(
        f"segment_ids must be [batch, kv_len]={(b, k.shape[1])}, got "
        f"{segment_ids.shape}")
  if sliding_window is not None and sliding_window < 1:
    raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")


def validate_decode_shapes(q, k_cache, v_cache, lengths):
  """Raises ValueError with a clear message for inconsistent decode inputs."""
  if k_cache.ndim != 4 or k_cache.shape != v_cache.shape:
    raise ValueError(f"caches must both be [B, S, Hkv, D]; got "
                     f"{k_cache.shape} and {v_cache.shape}")
  if q.ndim != 3:
    raise ValueError(f"decode q must be [B, H, D], got {q.shape}")
  b, h, d = q.shape
  if k_cache.shape[0] != b or k_cache.shape[3] != d or h % k_cache.shape[2]:
    raise ValueError(f"q {q.shape} does not fit caches {k_cache.shape}")
  if lengths.shape != (b,):
    raise ValueError(f"lengths must be [batch]={(b,)}, got {lengths.shape}")
