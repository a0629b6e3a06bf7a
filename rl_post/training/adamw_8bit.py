"""8-bit AdamW: Adam's moments stored blockwise-quantized, as an optax transformation.

Data flow of one update, per parameter leaf (f32 arithmetic throughout):

  m_prev = dequantize(mu)            r_prev = dequantize(nu_sqrt)
  m = b1 m_prev + (1 - b1) g         v = b2 r_prev^2 + (1 - b2) g^2
  update = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)
  mu = quantize(m)                   nu_sqrt = quantize(sqrt(v))

The update is computed from the new moments before they are quantized (as
bitsandbytes does), so quantization error enters through the stored state
only. Choices (after bitsandbytes' 8-bit Adam, Dettmers et al. 2022):

- Blocks: 256 consecutive values along a leaf's last axis (the last block of
  a row is shorter when the axis is not a multiple of 256); each block keeps
  its absmax as one f32 scale. Codes have the leaf's own shape, so they shard
  exactly like the parameter; scales are [..., ceil(last / 256)].
- Codes: an 8-bit index into bitsandbytes' "dynamic" map (`dynamic_code_map`):
  a decimal exponent and a linear fraction, 256 points spanning about seven
  decades below the block's absmax. A value lands on the nearest point, so
  its error is at most half the map's gap around it (`max_half_gap`); small
  values keep their relative precision, which a linear int8 code loses.
- The second moment is stored as sqrt(v) with the unsigned map (twice the
  points of the signed one): that halves its relative error and moves the
  underflow to zero from ~1e-7 of the block's max v to ~1e-13.
- Leaves with fewer than `min_quantized_size` (4096) values (norms, biases,
  scalars) keep f32 moments: they are a negligible share of the state.

State is a NamedTuple of arrays (orbax saves it, shardings map onto it); the
transformation has no Python-side state and is jittable.
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

BLOCK_SIZE = 256
MIN_QUANTIZED_SIZE = 4096
# values per slab of a quantized leaf's update (about 4 MB of f32 per temporary)
UPDATE_SLAB_SIZE = 1 << 20


def dynamic_code_map(signed: bool) -> np.ndarray:
  """bitsandbytes' dynamic 8-bit map (`create_dynamic_map`, 7 exponent bits): 256 sorted
  float32 points in [-1, 1] (signed) or [0, 1] (unsigned), 0 and 1 included.

  For exponent i = 0..6 the decade [10^(i-6) * 0.1, 10^(i-6)] holds the midpoints of
  2^i (signed, per sign) or 2^(i+1) (unsigned) equal steps: finer near 1.
  """
  points = [0.0, 1.0]
  for i in range(7):
    steps = 2 ** i if signed else 2 ** (i + 1)
    bounds = np.linspace(0.1, 1.0, steps + 1)
    means = 10.0 ** (i - 6) * (bounds[:-1] + bounds[1:]) / 2
    points += list(means) + (list(-means) if signed else [])
  assert len(points) == 256
  return np.sort(np.asarray(points, np.float32))


SIGNED_MAP = dynamic_code_map(signed=True)
UNSIGNED_MAP = dynamic_code_map(signed=False)


def max_half_gap(code_map: np.ndarray) -> float:
  """The largest error of a normalised value in [min, max] of `code_map` (in absmax units)."""
  return float(np.max(np.diff(code_map)) / 2)


class QuantizedMoment(NamedTuple):
  """One leaf's moment: codes index the code map; value = map[code] * its block's scale."""
  codes: jax.Array   # uint8, the leaf's shape
  scales: jax.Array  # float32 [..., ceil(last / block_size)]: each block's absmax


class ScaleByAdam8bitState(NamedTuple):
  count: jax.Array  # int32 scalar: updates done (for bias correction)
  mu: Any           # params-shaped tree of QuantizedMoment (or f32 arrays for small leaves)
  nu_sqrt: Any      # the same for sqrt of the second moment


def _to_blocks(x_SxD, block_size: int):
  """[..., D] -> [..., NB, block_size], zero padded (zeros never raise an absmax)."""
  d = x_SxD.shape[-1]
  num_blocks = -(-d // block_size)
  pad = num_blocks * block_size - d
  if pad:
    x_SxD = jnp.pad(x_SxD, [(0, 0)] * (x_SxD.ndim - 1) + [(0, pad)])
  return x_SxD.reshape(x_SxD.shape[:-1] + (num_blocks, block_size))


def _from_blocks(x_SxNBxB, d: int):
  return x_SxNBxB.reshape(x_SxNBxB.shape[:-2] + (-1,))[..., :d]


def quantize_blockwise(x_SxD, code_map, block_size: int = BLOCK_SIZE):
  """(codes_SxD uint8, scales_SxNB float32): nearest code map point of x / block absmax.

  Args:
    x_SxD: a float array of rank >= 1; blocks run along its last axis.
    code_map: 256 sorted float32 points (`SIGNED_MAP`, or `UNSIGNED_MAP` for x >= 0).
    block_size: values per block.
  """
  blocks = _to_blocks(x_SxD.astype(jnp.float32), block_size)
  scales_SxNB = jnp.max(jnp.abs(blocks), axis=-1)
  normalized = blocks / jnp.where(scales_SxNB > 0, scales_SxNB, 1.0)[..., None]
  code_map = jnp.asarray(code_map, jnp.float32)
  midpoints = (code_map[1:] + code_map[:-1]) / 2
  codes = jnp.searchsorted(midpoints, normalized).astype(jnp.uint8)
  return _from_blocks(codes, x_SxD.shape[-1]), scales_SxNB


def dequantize_blockwise(codes_SxD, scales_SxNB, code_map, block_size: int = BLOCK_SIZE):
  """float32 x_SxD from `quantize_blockwise`'s codes and scales."""
  values = jnp.asarray(code_map, jnp.float32)[codes_SxD.astype(jnp.int32)]
  blocks = _to_blocks(values, block_size) * scales_SxNB[..., None]
  return _from_blocks(blocks, codes_SxD.shape[-1])


def is_quantized(x) -> bool:
  return isinstance(x, QuantizedMoment)


def _is_quantized_leaf(shape, min_quantized_size: int) -> bool:
  return len(shape) >= 1 and math.prod(shape) >= min_quantized_size


def _store(x, code_map, quantized: bool, block_size: int):
  if not quantized:
    return x
  return QuantizedMoment(*quantize_blockwise(x, code_map, block_size))


def zero_moment(shape, code_map, quantized: bool, block_size: int = BLOCK_SIZE):
  """`_store` of f32 zeros of `shape`, built directly: every code is the map's zero point
  and every scale 0 (quantizing materialised zeros costs the leaf's f32 temporaries,
  which XLA may even constant-fold at compile time)."""
  if not quantized:
    return jnp.zeros(shape, jnp.float32)
  midpoints = (code_map[1:] + code_map[:-1]) / np.float32(2)
  zero_code = int(np.searchsorted(midpoints, np.float32(0)))  # as `quantize_blockwise` does
  num_blocks = -(-shape[-1] // block_size)
  return QuantizedMoment(jnp.full(shape, zero_code, jnp.uint8),
                         jnp.zeros(tuple(shape[:-1]) + (num_blocks,), jnp.float32))


def slab_rows(num_rows: int, row_size: int, slab_size: int) -> int:
  """Leading rows per slab of a leaf's update: at most `slab_size` values, and a divisor
  of `num_rows` when one is at least half that many rows (`lax.map` slices off and
  concatenates back a remainder, which copies the whole leaf's inputs and outputs)."""
  target = max(1, min(num_rows, slab_size // row_size))
  for rows in range(target, (target + 1) // 2 - 1, -1):
    if rows > 0 and num_rows % rows == 0:
      return rows
  return target


def _load(moment, code_map, block_size: int):
  if is_quantized(moment):
    return dequantize_blockwise(moment.codes, moment.scales, code_map, block_size)
  return moment


def scale_by_adam_8bit(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, *,
                       block_size: int = BLOCK_SIZE,
                       min_quantized_size: int = MIN_QUANTIZED_SIZE
                       ) -> optax.GradientTransformation:
  """Adam's scaling (as `optax.scale_by_adam`, eps_root = 0) with 8-bit moments."""
  if block_size < 1 or min_quantized_size < 1:
    raise ValueError(f"block_size and min_quantized_size must be >= 1, got "
                     f"{block_size} and {min_quantized_size}")

  def init_leaf(p, code_map):
    quantized = _is_quantized_leaf(p.shape, min_quantized_size)
    return zero_moment(p.shape, code_map, quantized, block_size)

  def init(params):
    return ScaleByAdam8bitState(
        count=jnp.zeros((), jnp.int32),
        mu=jax.tree.map(lambda p: init_leaf(p, SIGNED_MAP), params),
        nu_sqrt=jax.tree.map(lambda p: init_leaf(p, UNSIGNED_MAP), params))

  def update(updates, state, params=None):
    del params
    count = optax.safe_increment(state.count)
    t = count.astype(jnp.float32)
    correction1, correction2 = 1 - b1 ** t, 1 - b2 ** t

    def leaf_rows(g, mu, nu_sqrt):
      g32 = g.astype(jnp.float32)
      m = b1 * _load(mu, SIGNED_MAP, block_size) + (1 - b1) * g32
      v = b2 * jnp.square(_load(nu_sqrt, UNSIGNED_MAP, block_size)) + (1 - b2) * jnp.square(g32)
      r = jnp.sqrt(v)
      step = (m / correction1) / (r / jnp.sqrt(correction2) + eps)
      return (step.astype(g.dtype), _store(m, SIGNED_MAP, is_quantized(mu), block_size),
              _store(r, UNSIGNED_MAP, is_quantized(nu_sqrt), block_size))

    def leaf(g, mu, nu_sqrt):
      """A quantized leaf of rank >= 2 is updated a slab of leading rows at a time, so
      its f32 temporaries (dequantized moments, new moments, block scales) take one
      slab's memory instead of the leaf's; blocks run along the last axis, so the
      slabs do not change a bit of the result."""
      if g.ndim < 2 or not is_quantized(mu):
        return leaf_rows(g, mu, nu_sqrt)
      rows = slab_rows(g.shape[0], math.prod(g.shape[1:]), UPDATE_SLAB_SIZE)
      return jax.lax.map(lambda xs: leaf_rows(*xs), (g, mu, nu_sqrt), batch_size=rows)

    out = jax.tree.map(leaf, updates, state.mu, state.nu_sqrt)
    pick = lambda i: jax.tree.map(lambda _, o: o[i], updates, out)
    return pick(0), ScaleByAdam8bitState(count=count, mu=pick(1), nu_sqrt=pick(2))

  return optax.GradientTransformation(init, update)


def adamw_8bit(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 1e-4, *, block_size: int = BLOCK_SIZE,
               min_quantized_size: int = MIN_QUANTIZED_SIZE) -> optax.GradientTransformation:
  """`optax.adamw` with `scale_by_adam_8bit` in place of `scale_by_adam` (same chain)."""
  return optax.chain(
      scale_by_adam_8bit(b1, b2, eps, block_size=block_size,
                         min_quantized_size=min_quantized_size),
      optax.add_decayed_weights(weight_decay),
      optax.scale_by_learning_rate(learning_rate))


def moment_sharding(abstract_moment, param_sharding):
  """The sharding of one moment leaf given its parameter's (for `optax.tree_map_params`).

  Codes share the parameter's layout; scales keep its spec except on the last
  axis, which stays split only when the number of blocks divides over it.
  """
  if not is_quantized(abstract_moment):
    return param_sharding
  if not isinstance(param_sharding, NamedSharding):
    return QuantizedMoment(param_sharding, param_sharding)
  ndim = len(abstract_moment.codes.shape)
  spec = tuple(param_sharding.spec) + (None,) * (ndim - len(param_sharding.spec))
  last = spec[-1]
  axes = () if last is None else (last,) if isinstance(last, str) else tuple(last)
  size = math.prod(param_sharding.mesh.shape[a] for a in axes)
  if abstract_moment.scales.shape[-1] % size:
    last = None
  scales = NamedSharding(param_sharding.mesh, PartitionSpec(*spec[:-1], last))
  return QuantizedMoment(param_sharding, scales)
