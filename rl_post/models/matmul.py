"""2-D matmuls whose weight gradient XLA:CPU runs at full speed.

The weight gradient of `x_MxK @ w_KxN` is `x^T @ g`, a matmul contracting
over the rows of both operands. XLA folds the transpose into the dot, and
XLA:CPU runs such a dot (`lhs_contracting_dims={0}`) through Eigen at
~45 GFLOP/s on this project's CPU shapes instead of its ~65-80 GFLOP/s
matmul path (`experiments/benchmarks/update_speed.py`). On CPU,
`transposed_for_grad` therefore writes the transpose out first (an
optimization barrier keeps XLA from folding it back); the copy is a few
percent of the matmul. Other platforms get the plain transpose: their dots
take any operand layout.
"""

import jax
import jax.numpy as jnp
from jax import lax


def transposed_for_grad(x_MxK: jax.Array) -> jax.Array:
  """x^T as the left operand of a weight gradient: materialised on CPU."""
  if jax.default_backend() == "cpu":
    return lax.optimization_barrier(x_MxK.T)
  return x_MxK.T


@jax.custom_vjp
def matmul_MxN(x_MxK: jax.Array, w_KxN: jax.Array) -> jax.Array:
  """x @ w; its backward computes dw as transposed_for_grad(x) @ g."""
  return x_MxK @ w_KxN


def _matmul_fwd(x_MxK, w_KxN):
  return x_MxK @ w_KxN, (x_MxK, w_KxN)


def _matmul_bwd(residuals, g_MxN):
  x_MxK, w_KxN = residuals
  d_x = (g_MxN @ w_KxN.T).astype(x_MxK.dtype)
  d_w = (transposed_for_grad(x_MxK) @ g_MxN).astype(w_KxN.dtype)
  return d_x, d_w


matmul_MxN.defvjp(_matmul_fwd, _matmul_bwd)


def dense_MxN(x_MxK: jax.Array, w_KxN: jax.Array) -> jax.Array:
  """x @ w: `matmul_MxN` when both are float32 (the CPU case), else the plain
  matmul and its autodiff (mixed dtypes keep jnp's promotion rules)."""
  if x_MxK.dtype == w_KxN.dtype == jnp.float32:
    return matmul_MxN(x_MxK, w_KxN)
  return x_MxK @ w_KxN
