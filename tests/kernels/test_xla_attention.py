"""The XLA chunked path (the CPU default) against the dense reference."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_cases import CASES, IDS, Case, check_against_reference
from rl_post.kernels import xla_attention


def _xla(block_q, block_k):
  def fn(q, k, v, **kw):
    return xla_attention.xla_flash_attention(q, k, v, block_q=block_q,
                                             block_k=block_k, **kw)
  return fn


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_reference(case):
  # Blocks smaller than the sequence and not dividing it: ragged tails.
  check_against_reference(_xla(16, 8), case, seed=zlib.crc32(case.name.encode()))


def test_single_block_and_bfloat16():
  case = Case("bf16", 2, 24, 24, 4, 2, 16, segments=True, window=9)
  check_against_reference(_xla(512, 512), case, seed=1, atol=3e-2, rtol=3e-2,
                          dtype=jnp.bfloat16)


def test_memory_is_linear_in_sequence():
  """Compiled fwd+bwd at 8k tokens needs far less than one T x T matrix."""
  t, d = 8192, 32
  spec = jax.ShapeDtypeStruct((1, t, 1, d), jnp.float32)

  def loss(q, k, v):
    return xla_attention.xla_flash_attention(q, k, v).sum()

  compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(
      spec, spec, spec).compile()
  mem = compiled.memory_analysis()
  extra = mem.temp_size_in_bytes + mem.output_size_in_bytes
  quadratic = t * t * 4
  assert extra < quadratic / 8, (extra, quadratic)


def test_memory_stays_linear_inside_a_differentiated_scan():
  """Regression: in a model's layer scan, loop-invariant masks were hoisted
  out of the loop and stored for every block pair (quadratic memory)."""
  t = 4096
  q_spec = jax.ShapeDtypeStruct((1, t, 4, 32), jnp.float32)
  kv_spec = jax.ShapeDtypeStruct((1, t, 2, 32), jnp.float32)

  def loss(q, k, v):
    def layer(c, _):
      return c + xla_attention.xla_flash_attention(q * c, k * c, v).sum(), None
    return jax.lax.scan(layer, 1.0, None, length=2)[0]

  mem = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(
      q_spec, kv_spec, kv_spec).compile().memory_analysis()
  one_score_tensor = 4 * t * t * 4
  assert mem.temp_size_in_bytes < one_score_tensor / 8


def test_decode_matches_reference(rng):
  from rl_post.kernels import reference
  q = jnp.asarray(rng.normal(size=(3, 4, 8)), jnp.float32)
  kc = jnp.asarray(rng.normal(size=(3, 20, 2, 8)), jnp.float32)
  vc = jnp.asarray(rng.normal(size=(3, 20, 2, 8)), jnp.float32)
  lengths = jnp.asarray([0, 7, 20])
  out = xla_attention.xla_decode_attention(q, kc, vc, lengths)
  np.testing.assert_allclose(
      out, reference.reference_decode_attention(q, kc, vc, lengths),
      atol=1e-5, rtol=1e-5)
  np.testing.assert_array_equal(out[0], 0.0)
