"""Public attention entry points (the contract in DESIGN.md).

`impl` selects the implementation:
  "reference": dense, exact, quadratic memory (tests and tiny shapes).
  "xla":       memory-efficient chunked attention (any backend, O(T) memory).
  "pallas":    Pallas kernels: Mosaic on TPU, Triton on GPU; on CPU the
               kernels run in interpret mode (slow; for tests).
  "auto":      pallas on TPU/GPU, xla elsewhere.
The choice is made at trace time from `jax.default_backend()`, so a model
config can carry `attention_impl="auto"` and run unchanged everywhere.
"""

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

from rl_post.kernels import masking
from rl_post.kernels import pallas_decode
from rl_post.kernels import pallas_gpu
from rl_post.kernels import pallas_tpu
from rl_post.kernels import reference
from rl_post.kernels import xla_attention

IMPLS = ("auto", "pallas", "xla", "reference")
_ACCELERATORS = ("gpu", "tpu")


def _check_impl(impl):
  if impl not in IMPLS:
    raise ValueError(f"attention impl must be one of {IMPLS}, got {impl!r}")


def resolve_impl(impl, platform=None):
  """The concrete implementation ("pallas" | "xla" | "reference") for impl."""
  _check_impl(impl)
  platform = platform or jax.default_backend()
  if impl == "auto":
    return "pallas" if platform in _ACCELERATORS else "xla"
  return impl


def flash_attention(q, k, v, *, causal=True, segment_ids=None,
                    sliding_window=None, impl="auto", interpret=None):
  """Attention over [B, T, H, D] queries and [B, S, Hkv, D] keys/values.

  Args:
    q: [batch, q_len, num_heads, head_dim]; queries are aligned to the end
      of the keys (q_len <= kv_len).
    k, v: [batch, kv_len, num_kv_heads, head_dim]; num_heads must be a
      multiple of num_kv_heads (GQA/MQA; K/V are never repeated).
    causal: mask keys after the query position.
    segment_ids: optional [batch, kv_len] ints; attend within a segment only
      (packed sequences).
    sliding_window: optional int w; a query at p sees keys in (p - w, p].
    impl: "auto" | "pallas" | "xla" | "reference".
    interpret: Pallas only. None: interpret when not on an accelerator;
      True/False; or a `pltpu.InterpretParams`, which runs the TPU kernel in
      the TPU interpreter (memory checks) on CPU.
  Returns:
    [batch, q_len, num_heads, head_dim] in q's dtype; rows that see no key
    are zeros. Differentiable (flash-style backward, O(T) memory) for every
    impl but "reference".
  """
  impl = resolve_impl(impl)
  masking.validate_shapes(q, k, v, segment_ids, sliding_window)
  kwargs = dict(causal=causal, segment_ids=segment_ids,
                sliding_window=sliding_window)
  if impl == "reference":
    return reference.reference_attention(q, k, v, **kwargs)
  if impl == "xla":
    return xla_attention.xla_flash_attention(q, k, v, **kwargs)
  platform = jax.default_backend()
  if interpret is None:
    interpret = platform not in _ACCELERATORS
  if platform == "tpu" or isinstance(interpret, pltpu.InterpretParams):
    return pallas_tpu.flash_attention(q, k, v, interpret=interpret, **kwargs)
  return pallas_gpu.flash_attention(q, k, v, interpret=bool(interpret),
                                    **kwargs)


def decode_impl(impl, head_dim, platform=None):
  """The concrete implementation `decode_attention(impl=impl)` runs on `platform`."""
  impl, platform = resolve_impl(impl, platform), platform or jax.default_backend()
  if impl == "pallas" and platform == "gpu" and head_dim & (head_dim - 1):
    # Triton tiles are powers of two; padding would copy the cache per step.
    return "xla"
  return impl


def decode_attention(q, k_cache, v_cache, lengths, *, impl="auto", kv_layout="bskd"):
  """One decode step: q [B, H, D] over a KV cache, lengths [B].

  Row b attends to cache slots [0, lengths[b]); rows with length 0 give
  zeros. "pallas" on CPU runs the kernel in interpret mode; "auto" on GPU
  uses "xla" when head_dim is not a power of two.

  kv_layout: "bskd" (k, v: [B, S, Hkv, D]; every impl) or "transposed"
  (k: [B, Hkv, D, S], v: [B, Hkv, S, D]; "xla" and "reference"), see
  `rl_post.models.kv_cache`.
  """
  if kv_layout not in ("bskd", "transposed"):
    raise ValueError(f"kv_layout must be 'bskd' or 'transposed', got {kv_layout!r}")
  impl = decode_impl(impl, q.shape[-1])
  if kv_layout == "transposed":
    if impl == "pallas":
      raise ValueError("the Pallas decode kernels read the 'bskd' cache layout")
    if (k_cache.ndim != 4 or v_cache.ndim != 4 or
        k_cache.shape != tuple(v_cache.shape[i] for i in (0, 1, 3, 2))):
      raise ValueError(f"transposed caches must be k [B, Hkv, D, S] and v [B, Hkv, S, D]; "
                       f"got {k_cache.shape} and {v_cache.shape}")
    as_bskd = lambda x, perm: jax.ShapeDtypeStruct(tuple(x.shape[i] for i in perm), x.dtype)
    masking.validate_decode_shapes(q, as_bskd(k_cache, (0, 3, 1, 2)),
                                   as_bskd(v_cache, (0, 2, 1, 3)), lengths)
    if impl == "reference":
      return reference.reference_decode_attention(
          q, jnp.transpose(k_cache, (0, 3, 1, 2)), jnp.swapaxes(v_cache, 1, 2), lengths)
    return xla_attention.xla_decode_attention_transposed(q, k_cache, v_cache, lengths)
  masking.validate_decode_shapes(q, k_cache, v_cache, lengths)
  if impl == "reference":
    return reference.reference_decode_attention(q, k_cache, v_cache, lengths)
  if impl == "xla":
    return xla_attention.xla_decode_attention(q, k_cache, v_cache, lengths)
  platform = jax.default_backend()
  return pallas_decode.decode_attention(
      q, k_cache, v_cache, lengths,
      platform="tpu" if platform == "tpu" else "gpu",
      interpret=platform not in _ACCELERATORS)
