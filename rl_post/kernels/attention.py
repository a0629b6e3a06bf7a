"""Public attention entry points (the contract in DESIGN.md).

`impl` selects the implementation:
  "reference": dense, exact, quadratic memory (tests and tiny shapes).
  "xla":       memory-efficient chunked attention (any backend).
  "pallas":    Pallas kernels (TPU Mosaic / GPU Triton).
  "auto":      pallas on TPU/GPU, xla on CPU.
"""

from rl_post.kernels import reference

IMPLS = ("auto", "pallas", "xla", "reference")


def _check_impl(impl):
  if impl not in IMPLS:
    raise ValueError(f"attention impl must be one of {IMPLS}, got {impl!r}")


def flash_attention(q, k, v, *, causal=True, segment_ids=None,
                    sliding_window=None, impl="auto", interpret=None):
  """Attention over [B, T, H, D] queries and [B, S, Hkv, D] keys/values."""
  _check_impl(impl)
  del interpret
  return reference.reference_attention(
      q, k, v, causal=causal, segment_ids=segment_ids,
      sliding_window=sliding_window)


def decode_attention(q, k_cache, v_cache, lengths, *, impl="auto"):
  """One decode step: q [B, H, D] over caches [B, S, Hkv, D], lengths [B]."""
  _check_impl(impl)
  return reference.reference_decode_attention(q, k_cache, v_cache, lengths)
