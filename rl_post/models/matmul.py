"""2-D matmuls whose weight gradient XLA:CPU runs at full speed, with f32 accumulation.

The weight gradient of `x_MxK @ w_KxN` is `x^T @ g`, a matmul contracting
over the rows of both operands. XLA folds the transpose into the dot, and
XLA:CPU runs such a dot (`lhs_contracting_dims={0}`) through Eigen, below
the speed of its matmul path on this project's CPU shapes
(`experiments/benchmarks/update_speed.py` and `update_profile.py` measure
the update; docs/algorithms.md). On CPU, `transposed_for_grad` therefore
writes the transpose out first (an optimization barrier keeps XLA from
folding it back); the copy is cheap next to the matmul. Other platforms get
the plain transpose: their dots take any operand layout.

Every product here accumulates in float32 (`dot_acc32`) and is rounded to
its operands' dtype afterwards: the same numbers for f32, and for bf16
(mixed precision) the fast path of XLA:CPU, whose bf16 x bf16 -> bf16 dot
is slower than bf16 x bf16 -> f32 on AVX512-BF16 cores
(`experiments/benchmarks/precision_matmul.py`; docs/results.md, "Matmuls
by precision and operand layout").
"""

import jax
import jax.numpy as jnp
from jax import lax


def dot_acc32(a_MxK: jax.Array, b_KxN: jax.Array, out_dtype=None) -> jax.Array:
  """a @ b accumulated in float32 (float64 for float64 operands), returned in
  `out_dtype` (default: a's dtype)."""
  acc = jnp.promote_types(a_MxK.dtype, jnp.float32)
  out = jnp.dot(a_MxK, b_KxN, preferred_element_type=acc)
  return out.astype(a_MxK.dtype if out_dtype is None else out_dtype)


def transposed_for_grad(x_MxK: jax.Array) -> jax.Array:
  """x^T as the left operand of a weight gradient: materialised on CPU."""
  if jax.default_backend() == "cpu":
    return lax.optimization_barrier(x_MxK.T)
  return x_MxK.T


def weight_grad_KxN(x_MxK: jax.Array, g_MxN: jax.Array, out_dtype=None) -> jax.Array:
  """x^T @ g, the weight gradient of x @ w, accumulated in f32 (out_dtype: default x's).

  On CPU a transpose is written out either way, and a transposing copy is
  slow (strided reads or writes): for a wide x (the SwiGLU down projection's
  [M, F] hidden, F = 4E) it took longer than the matmul it fed
  (`experiments/benchmarks/update_profile.py`; docs/results.md, "Update
  speed"). So when x^T is the larger copy, this computes (g^T @ x)^T
  instead: it transposes g and the [N, K] result, M*N + K*N elements
  instead of M*K.
  """
  out_dtype = x_MxK.dtype if out_dtype is None else out_dtype
  (m, k), n = x_MxK.shape, g_MxN.shape[1]
  if jax.default_backend() != "cpu" or m * k <= m * n + k * n:
    return dot_acc32(transposed_for_grad(x_MxK), g_MxN, out_dtype)
  d_NxK = dot_acc32(transposed_for_grad(g_MxN), x_MxK, out_dtype)
  return lax.optimization_barrier(d_NxK).T


@jax.custom_vjp
def matmul_MxN(x_MxK: jax.Array, w_KxN: jax.Array) -> jax.Array:
  """x @ w (x and w of one dtype), accumulated in f32; its backward computes
  dw as transposed_for_grad(x) @ g, also accumulated in f32."""
  return dot_acc32(x_MxK, w_KxN)


def _matmul_fwd(x_MxK, w_KxN):
  return dot_acc32(x_MxK, w_KxN), (x_MxK, w_KxN)


def _matmul_bwd(residuals, g_MxN):
  x_MxK, w_KxN = residuals
  g_MxN = g_MxN.astype(x_MxK.dtype)
  d_x = dot_acc32(g_MxN, w_KxN.T, x_MxK.dtype)
  d_w = weight_grad_KxN(x_MxK, g_MxN, w_KxN.dtype)
  return d_x, d_w


matmul_MxN.defvjp(_matmul_fwd, _matmul_bwd)


@jax.custom_vjp
def matmul_f32_MxN(x_MxK: jax.Array, w_KxN: jax.Array) -> jax.Array:
  """x @ w as float32 (x and w of one dtype, e.g. bf16 hidden states and head):
  logits for an f32 log-softmax. The backward rounds the f32 cotangent to
  the operands' dtype and runs `matmul_MxN`'s two products, as autocast does."""
  return dot_acc32(x_MxK, w_KxN, jnp.float32)


def _matmul_f32_fwd(x_MxK, w_KxN):
  return dot_acc32(x_MxK, w_KxN, jnp.float32), (x_MxK, w_KxN)


matmul_f32_MxN.defvjp(_matmul_f32_fwd, _matmul_bwd)


def dense_MxN(x_MxK: jax.Array, w_KxN: jax.Array) -> jax.Array:
  """x @ w: `matmul_MxN` when both are of one floating dtype (f32, or bf16
  under mixed precision), else the plain matmul and its autodiff (mixed
  dtypes keep jnp's promotion rules)."""
  if x_MxK.dtype == w_KxN.dtype and jnp.issubdtype(x_MxK.dtype, jnp.floating):
    return matmul_MxN(x_MxK, w_KxN)
  return x_MxK @ w_KxN
