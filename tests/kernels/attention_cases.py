"""Shared shape grid and comparison helpers for the attention numerics tests.

Each case mixes several features so the grid stays small (every Pallas case
costs a compile in interpret mode): ragged lengths that are not block
multiples, GQA/MQA/MHA, segment boundaries, windows, prefix continuation
(q_len < kv_len) and non-causal attention.
"""

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.kernels import reference


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  batch: int
  q_len: int
  kv_len: int
  heads: int
  kv_heads: int
  head_dim: int
  causal: bool = True
  segments: bool = False
  window: Optional[int] = None


CASES = [
    Case("gqa_ragged_segments", 2, 37, 37, 4, 2, 16, segments=True),
    Case("mqa_prefix_window", 1, 21, 50, 4, 1, 8, window=7),
    # head_dim 12: the GPU kernels pad it to 16 (Triton tiles).
    Case("mha_noncausal_segments", 1, 33, 33, 2, 2, 12, causal=False,
         segments=True),
]
IDS = [c.name for c in CASES]


def make_inputs(case, seed, dtype=jnp.float32):
  """Fresh random q, k, v, cotangent and (sorted, packed) segment ids."""
  rng = np.random.default_rng(seed)
  draw = lambda *shape: jnp.asarray(rng.normal(size=shape), dtype)
  q = draw(case.batch, case.q_len, case.heads, case.head_dim)
  k = draw(case.batch, case.kv_len, case.kv_heads, case.head_dim)
  v = draw(case.batch, case.kv_len, case.kv_heads, case.head_dim)
  do = draw(case.batch, case.q_len, case.heads, case.head_dim)
  seg = None
  if case.segments:
    seg = jnp.asarray(np.sort(rng.integers(0, 4, (case.batch, case.kv_len)), 1),
                      jnp.int32)
  return q, k, v, do, seg


def fwd_and_grads(attn_fn, q, k, v, do, **kw):
  """(out, (dq, dk, dv)) of attn_fn, compiled as one program (eager is slow)."""
  @jax.jit
  def run(q, k, v, do, seg):
    out, vjp = jax.vjp(lambda q, k, v: attn_fn(q, k, v, segment_ids=seg, **kw),
                       q, k, v)
    return out, vjp(do)
  return run(q, k, v, do, kw.pop("segment_ids", None))


def check_against_reference(attn_fn, case, seed, *, atol=2e-5, rtol=2e-5,
                            dtype=jnp.float32):
  """Forward and all three input gradients of attn_fn match the reference."""
  q, k, v, do, seg = make_inputs(case, seed, dtype)
  kw = dict(causal=case.causal, sliding_window=case.window)
  out, grads = fwd_and_grads(attn_fn, q, k, v, do, segment_ids=seg, **kw)
  f32 = lambda x: x.astype(jnp.float32)
  ref_out, ref_grads = fwd_and_grads(reference.reference_attention, f32(q),
                                     f32(k), f32(v), f32(do), segment_ids=seg,
                                     **kw)
  assert out.shape == q.shape and out.dtype == q.dtype
  np.testing.assert_allclose(f32(out), ref_out, atol=atol, rtol=rtol)
  for name, got, want in zip("qkv", grads, ref_grads):
    assert got.dtype == dtype, name
    np.testing.assert_allclose(f32(got), want, atol=atol * 4, rtol=rtol * 4,
                               err_msg=f"d{name}")
