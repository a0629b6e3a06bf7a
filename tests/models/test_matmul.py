"""matmul_MxN: the same values and gradients as autodiff of x @ w, its transpose written out on CPU."""

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.models.matmul import dense_MxN, matmul_MxN


def test_matmul_gradients_match_autodiff():
  kx, kw, kg = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(kx, (48, 32))
  w = jax.random.normal(kw, (32, 24))
  g = jax.random.normal(kg, (48, 24))
  out_a, vjp_a = jax.vjp(lambda x, w: x @ w, x, w)
  out_b, vjp_b = jax.jit(lambda x, w: jax.vjp(matmul_MxN, x, w))(x, w)
  np.testing.assert_allclose(out_b, out_a, rtol=1e-6, atol=1e-6)
  for a, b in zip(vjp_a(g), vjp_b(g)):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_weight_gradient_dot_reads_a_written_out_transpose_on_cpu():
  x, w = jnp.ones((64, 16)), jnp.ones((16, 8))
  hlo = jax.jit(jax.grad(lambda x, w: matmul_MxN(x, w).sum(), argnums=1)).lower(
      x, w).compile().as_text()
  plain = jax.jit(jax.grad(lambda x, w: (x @ w).sum(), argnums=1)).lower(
      x, w).compile().as_text()
  # autodiff contracts over the rows of both operands; ours over the columns of x^T
  assert "lhs_contracting_dims={0}" in plain
  assert "lhs_contracting_dims={0}" not in hlo and "lhs_contracting_dims={1}" in hlo


def test_dense_keeps_autodiff_for_other_dtypes():
  x, w = jnp.ones((4, 3), jnp.bfloat16), jnp.ones((3, 2), jnp.float32)
  out = dense_MxN(x, w)
  assert out.dtype == (x @ w).dtype
  d_x, d_w = jax.grad(lambda x, w: dense_MxN(x, w).sum(), argnums=(0, 1))(x, w)
  assert d_x.dtype == jnp.bfloat16 and d_w.dtype == jnp.float32
