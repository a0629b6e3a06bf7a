"""Dense attention references: exact, quadratic in memory, used by tests.

These are the ground truth every optimized kernel is compared against. They
compute in float32 (or float64 when inputs are float64) with the highest
matmul precision, and support everything the kernels do: causal masking,
grouped-query attention, segment ids for packed sequences and a sliding
window.
"""

import jax
import jax.numpy as jnp

_NEG_INF = -1e30


def attention_mask_BxQxK(
    q_len: int,
    kv_len: int,
    *,
    causal: bool,
    segment_ids_BxT=None,
    kv_segment_ids_BxT=None,
    sliding_window=None,
):
  """Boolean [B|1, q_len, kv_len] mask of allowed (query, key) pairs.

  Queries are aligned to the end of the keys: query i sits at position
  i + (kv_len - q_len), so q_len == kv_len is the usual square case and
  q_len < kv_len is a continuation of a prefix.
  """
  q_pos = jnp.arange(q_len)[:, None] + (kv_len - q_len)
  k_pos = jnp.arange(kv_len)[None, :]
  mask = jnp.ones((q_len, kv_len), dtype=bool)
  if causal:
    mask &= k_pos <= q_pos
  if sliding_window is not None:
    mask &= q_pos - k_pos < sliding_window
  mask = mask[None]
  if segment_ids_BxT is not None:
    kv_seg = segment_ids_BxT if kv_segment_ids_BxT is None else kv_segment_ids_BxT
    q_seg = segment_ids_BxT[:, -q_len:] if kv_segment_ids_BxT is None else segment_ids_BxT
    mask = mask & (q_seg[:, :, None] == kv_seg[:, None, :])
  return mask


def reference_attention(q, k, v, *, causal=True, segment_ids=None,
                        sliding_window=None):
  """softmax(q k^T / sqrt(D)) v with GQA; fully masked rows give zeros.

  Args:
    q: [B, Tq, H, D]; k, v: [B, Tk, Hkv, D] with H % Hkv == 0.
    segment_ids: optional [B, Tk] int; tokens attend only within a segment.
    sliding_window: optional int w; query at p sees keys in (p - w, p].
  Returns:
    [B, Tq, H, D] in q's dtype.
  """
  b, q_len, h, d = q.shape
  kv_len, h_kv = k.shape[1], k.shape[2]
  if h % h_kv:
    raise ValueError(f"num_heads={h} is not a multiple of num_kv_heads={h_kv}")
  compute_dtype = jnp.promote_types(q.dtype, jnp.float32)
  q_BxQxKxGxD = q.reshape(b, q_len, h_kv, h // h_kv, d).astype(compute_dtype)
  scores = jnp.einsum("bqkgd,bskd->bkgqs", q_BxQxKxGxD, k.astype(compute_dtype),
                      precision=jax.lax.Precision.HIGHEST) / jnp.sqrt(d).astype(compute_dtype)
  mask = attention_mask_BxQxK(q_len, kv_len, causal=causal,
                              segment_ids_BxT=segment_ids,
                              sliding_window=sliding_window)
  mask = mask[:, None, None]  # [B|1, 1, 1, Q, K]
  scores = jnp.where(mask, scores, _NEG_INF)
  probs = jax.nn.softmax(scores, axis=-1)
  probs = jnp.where(mask.any(-1, keepdims=True), probs, 0.0)
  out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v.astype(compute_dtype),
                   precision=jax.lax.Precision.HIGHEST)
  return out.reshape(b, q_len, h, d).astype(q.dtype)


def reference_decode_attention(q, k_cache, v_cache, lengths):
  """One query per row against the first lengths[b] cache slots.

  Args:
    q: [B, H, D]; k_cache, v_cache: [B, S, Hkv, D]; lengths: [B] int.
  Returns:
    [B, H, D]; rows with length 0 are zeros.
  """
  b, h, d = q.shape
  s, h_kv = k_cache.shape[1], k_cache.shape[2]
  if h % h_kv:
    raise ValueError(f"num_heads={h} is not a multiple of num_kv_heads={h_kv}")
  compute_dtype = jnp.promote_types(q.dtype, jnp.float32)
  q_BxKxGxD = q.reshape(b, h_kv, h // h_kv, d).astype(compute_dtype)
  scores = jnp.einsum("bkgd,bskd->bkgs", q_BxKxGxD, k_cache.astype(compute_dtype),
                      precision=jax.lax.Precision.HIGHEST) / jnp.sqrt(d).astype(compute_dtype)
  valid_BxS = jnp.arange(s)[None, :] < lengths[:, None]
  scores = jnp.where(valid_BxS[:, None, None, :], scores, _NEG_INF)
  probs = jax.nn.softmax(scores, axis=-1)
  probs = jnp.where((lengths > 0)[:, None, None, None], probs, 0.0)
  out = jnp.einsum("bkgs,bskd->bkgd", probs, v_cache.astype(compute_dtype),
                   precision=jax.lax.Precision.HIGHEST)
  return out.reshape(b, h, d).astype(q.dtype)
