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


@pytest.mark.parametrize("impl", ["xla", "reference"])
def test_transposed_cache_decode_equals_reference(rng, impl):
  # ragged lengths (one empty row), GQA with 2 query heads per kv head, slots > length
  q = jnp.asarray(rng.normal(size=(3, 4, 8)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(3, 16, 2, 8)), jnp.float32)
  v = jnp.asarray(rng.normal(size=(3, 16, 2, 8)), jnp.float32)
  lengths = jnp.asarray([9, 16, 0])
  want = attention.decode_attention(q, k, v, lengths, impl="reference")
  k_t, v_t = jnp.transpose(k, (0, 2, 3, 1)), jnp.transpose(v, (0, 2, 1, 3))
  got = jax.jit(lambda q, k, v: attention.decode_attention(
      q, k, v, lengths, impl=impl, kv_layout="transposed"))(q, k_t, v_t)
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
  assert not np.asarray(got[2]).any()


def test_decode_impl_and_transposed_layout_errors():
  assert attention.decode_impl("auto", 64, "cpu") == "xla"
  assert attention.decode_impl("auto", 64, "gpu") == "pallas"
  assert attention.decode_impl("auto", 96, "gpu") == "xla"  # Triton tiles powers of two
  assert attention.decode_impl("auto", 96, "tpu") == "pallas"
  q, k_t, v_t = jnp.zeros((2, 4, 8)), jnp.zeros((2, 2, 8, 16)), jnp.zeros((2, 2, 16, 8))
  lengths = jnp.zeros(2, jnp.int32)
  with pytest.raises(ValueError, match="kv_layout must be"):
    attention.decode_attention(q, k_t, v_t, lengths, kv_layout="bksd")
  with pytest.raises(ValueError, match="Pallas decode kernels read the 'bskd'"):
    attention.decode_attention(q, k_t, v_t, lengths, impl="pallas", kv_layout="transposed")
  with pytest.raises(ValueError, match="transposed caches must be"):
    attention.decode_attention(q, k_t[0], v_t, lengths, kv_layout="transposed")
  with pytest.raises(ValueError, match="transposed caches must be"):  # k's D on axis 2
    attention.decode_attention(q, jnp.zeros((2, 2, 16, 8)), v_t, lengths,
                               kv_layout="transposed")
  with pytest.raises(ValueError, match="does not fit caches"):  # q's head_dim 8, caches 4
    attention.decode_attention(q, jnp.zeros((2, 2, 4, 16)), jnp.zeros((2, 2, 16, 4)), lengths,
                               kv_layout="transposed")
