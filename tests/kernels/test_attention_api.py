"""The public dispatcher: impl selection, agreement and clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.kernels import attention


def test_auto_picks_xla_on_cpu_and_pallas_on_accelerators():
  assert attention.resolve_impl("auto", "cpu") == "xla"
  assert attention.resolve_impl("auto", "gpu") == "pallas"
  assert attention.resolve_impl("auto", "tpu") == "pallas"
  assert attention.resolve_impl("reference", "tpu") == "reference"


@pytest.mark.parametrize("impl", ["xla", "pallas"])  # "auto" is "xla" here
def test_impls_agree(rng, impl):
  q = jnp.asarray(rng.normal(size=(1, 12, 4, 8)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 12, 2, 8)), jnp.float32)
  v = jnp.asarray(rng.normal(size=(1, 12, 2, 8)), jnp.float32)
  seg = jnp.asarray([[0] * 5 + [1] * 7])
  want = attention.flash_attention(q, k, v, segment_ids=seg, impl="reference")
  got = jax.jit(lambda q, k, v: attention.flash_attention(
      q, k, v, segment_ids=seg, impl=impl))(q, k, v)
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
  lengths = jnp.asarray([9])
  dec = attention.decode_attention(q[:, 0], k, v, lengths, impl=impl)
  dec_want = attention.decode_attention(q[:, 0], k, v, lengths,
                                        impl="reference")
  np.testing.assert_allclose(dec, dec_want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kwargs,shapes,message", [
    (dict(impl="flash"), None, "impl must be one of"),
    ({}, ((1, 8, 3, 8), (1, 8, 2, 8)), "not a multiple of num_kv_heads"),
    ({}, ((1, 9, 2, 8), (1, 8, 2, 8)), "exceeds kv_len"),
    ({}, ((1, 8, 2, 8), (1, 8, 2, 4)), "head_dim"),
    ({}, ((1, 8, 2, 8, 1), (1, 8, 2, 8)), r"expects q \[B, Tq, H, D\]"),
    (dict(sliding_window=0), None, "sliding_window must be >= 1"),
    (dict(segment_ids=jnp.zeros((1, 7), jnp.int32)), None,
     r"segment_ids must be \[batch, kv_len\]"),
])
def test_bad_inputs_give_clear_errors(kwargs, shapes, message):
  q_shape, kv_shape = shapes or ((1, 8, 2, 8), (1, 8, 2, 8))
  with pytest.raises(ValueError, match=message):
    attention.flash_attention(jnp.zeros(q_shape), jnp.zeros(kv_shape),
                              jnp.zeros(kv_shape), **kwargs)


def test_bad_decode_inputs_give_clear_errors():
  q, cache = jnp.zeros((2, 4, 8)), jnp.zeros((2, 16, 2, 8))
  with pytest.raises(ValueError, match="impl must be one of"):
    attention.decode_attention(q, cache, cache, jnp.zeros(2, jnp.int32),
                               impl="fast")
  with pytest.raises(ValueError, match="lengths must be"):
    attention.decode_attention(q, cache, cache, jnp.zeros(3, jnp.int32))
  with pytest.raises(ValueError, match="caches must both be"):
    attention.decode_attention(q, cache, cache[:, :8], jnp.zeros(2, jnp.int32))
