"""matmul_MxN: the same values and gradients as autodiff of x @ w, its transpose written out on CPU."""

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.models.matmul import dense_MxN, matmul_f32_MxN, matmul_MxN, weight_grad_KxN


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


def _bf16_inputs():
  kx, kw, kg = jax.random.split(jax.random.key(1), 3)
  x = jax.random.normal(kx, (40, 48))
  w = jax.random.normal(kw, (48, 24))
  g = jax.random.normal(kg, (40, 24))
  return x, w, g


def test_bf16_matmul_accumulates_in_f32_forward_and_backward():
  x, w, g = _bf16_inputs()
  x16, w16, g16 = (a.astype(jnp.bfloat16) for a in (x, w, g))
  out, vjp = jax.jit(lambda x, w: jax.vjp(matmul_MxN, x, w))(x16, w16)
  d_x, d_w = vjp(g16)
  assert out.dtype == d_x.dtype == d_w.dtype == jnp.bfloat16
  as32 = lambda a: np.asarray(a.astype(jnp.float32))
  # exactly the f32-accumulated products of the bf16 operands, rounded once to bf16
  exact = lambda a, b: (as32(a) @ as32(b)).astype(jnp.bfloat16).astype(np.float32)
  np.testing.assert_allclose(as32(out), exact(x16, w16), rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(as32(d_x), exact(g16, w16.T), rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(as32(d_w), exact(x16.T, g16), rtol=1e-2, atol=1e-2)
  # and close to the f32 matmul of the unrounded inputs
  np.testing.assert_allclose(as32(out), np.asarray(x @ w), rtol=0.05, atol=0.2)


def test_bf16_products_are_bf16_dots_with_f32_results():
  """Every product of the forward and backward is a bf16 x bf16 dot asking for
  an f32 result (XLA:CPU's fast bf16 path; bf16 -> bf16 is ~2x slower)."""
  x16, w16, _ = (a.astype(jnp.bfloat16) for a in _bf16_inputs())
  text = jax.jit(jax.value_and_grad(lambda x, w: matmul_MxN(x, w).astype(jnp.float32).sum(),
                                    argnums=(0, 1))).lower(x16, w16).as_text()
  dots = [line for line in text.splitlines() if "dot_general" in line]
  assert len(dots) == 3, dots
  assert all(line.rstrip().endswith("xf32>") and "bf16" in line for line in dots), dots


def test_matmul_f32_gives_f32_logits_and_operand_dtype_gradients():
  x, w, g = _bf16_inputs()
  x16, w16 = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  out, vjp = jax.vjp(matmul_f32_MxN, x16, w16)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(
      np.asarray(out), np.asarray(x16.astype(jnp.float32) @ w16.astype(jnp.float32)),
      rtol=1e-5, atol=1e-4)
  d_x, d_w = vjp(g)
  assert d_x.dtype == d_w.dtype == jnp.bfloat16
  ref_x, ref_w = jax.vjp(lambda x, w: x @ w, x16.astype(jnp.float32), w16.astype(jnp.float32))[1](g)
  np.testing.assert_allclose(np.asarray(d_x, np.float32), np.asarray(ref_x), rtol=0.05, atol=0.3)
  np.testing.assert_allclose(np.asarray(d_w, np.float32), np.asarray(ref_w), rtol=0.05, atol=0.3)
  # f32 operands: the plain product and its autodiff, to f32 rounding
  out32, vjp32 = jax.vjp(matmul_f32_MxN, x, w)
  np.testing.assert_allclose(np.asarray(out32), np.asarray(x @ w), rtol=1e-6, atol=1e-5)
  for a, b in zip(vjp32(g), jax.vjp(lambda x, w: x @ w, x, w)[1](g)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_float64_products_keep_float64_accumulation():
  with jax.enable_x64(True):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 7)))
    w = jnp.asarray(np.random.default_rng(1).normal(size=(7, 3)))
    out = matmul_MxN(x, w)
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) @ np.asarray(w), rtol=1e-12)


def test_weight_grad_is_x_transpose_g_whichever_side_it_transposes():
  kx, kg = jax.random.split(jax.random.key(2))
  for (m, k, n) in ((96, 64, 16), (96, 16, 64), (8, 8, 8)):  # wide x, narrow x, square
    x = jax.random.normal(kx, (m, k))
    g = jax.random.normal(kg, (m, n))
    d = jax.jit(weight_grad_KxN)(x, g)
    assert d.shape == (k, n) and d.dtype == x.dtype
    np.testing.assert_allclose(d, np.asarray(x).T @ np.asarray(g), rtol=1e-5, atol=1e-5)
  x16, g16 = x.astype(jnp.bfloat16), g.astype(jnp.bfloat16)
  assert weight_grad_KxN(x16, g16, jnp.float32).dtype == jnp.float32


def _transposed_copies(hlo: str) -> list[str]:
  return [line.split("=")[1].split()[0] for line in hlo.splitlines()
          if " transpose(" in line or ("fusion(" in line and "transpose" in line)]


def test_a_wide_x_is_not_transposed_on_cpu_its_gradient_is():
  """x [M, K] with K >> N: (g^T x)^T writes g^T [N, M] and the [N, K] result, not x^T [K, M]."""
  x, g = jnp.ones((96, 64)), jnp.ones((96, 16))
  hlo = jax.jit(weight_grad_KxN).lower(x, g).compile().as_text()
  shapes = " ".join(_transposed_copies(hlo))
  assert "f32[64,96]" not in shapes, shapes
  narrow = jax.jit(weight_grad_KxN).lower(g, x).compile().as_text()  # x [96, 16]: x^T it is
  assert "f32[16,96]" in " ".join(_transposed_copies(narrow))
