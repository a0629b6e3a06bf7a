"""The KV cache's memory layout: how it is created, written and named for sharding.

Two layouts, picked from the model config and the platform (never by the
caller), so the cache always suits the decode attention that reads it:

  "bskd"        k, v: [B, S, K, D]. What the Pallas decode kernels read
                (TPU, GPU): a block of slots is contiguous per row.
  "transposed"  k: [B, K, D, S], v: [B, K, S, D]. What the XLA decode
                attention reads (CPU, and GPU head dims that Triton cannot
                tile). Scores reduce k over D, which is not the minor axis,
                so the loop is vectorised over slots; over [B, S, K, D] the
                reduction runs along the 32-64 contiguous floats of one
                slot, and was the slowest op of a CPU decode step after
                the matmuls (`experiments/benchmarks/decode_profile.py`).

Slot s of row b holds the token at absolute position s in both layouts.
"""

import jax
import jax.numpy as jnp

from rl_post.kernels import attention as attention_kernels

LAYOUTS = ("bskd", "transposed")
_AXES = {
    "bskd": {"k": ("cache_batch", "cache_length", "cache_kv_heads", "head_dim"),
             "v": ("cache_batch", "cache_length", "cache_kv_heads", "head_dim")},
    "transposed": {"k": ("cache_batch", "cache_kv_heads", "head_dim", "cache_length"),
                   "v": ("cache_batch", "cache_kv_heads", "cache_length", "head_dim")},
}


def layout(config, platform=None) -> str:
  """The layout the decode attention for `config` reads on `platform`."""
  impl = attention_kernels.decode_impl(config.attention_impl, config.head_dim, platform)
  return "transposed" if impl == "xla" else "bskd"


def logical_axes(cache_layout: str) -> dict:
  """{"k": axes, "v": axes}: logical axis names for the sharding rules table."""
  return _AXES[cache_layout]


def shapes(cache_layout: str, batch: int, slots: int, kv_heads: int, head_dim: int) -> dict:
  """{"k": shape, "v": shape} of one layer's cache in `cache_layout`."""
  b, s, k, d = batch, slots, kv_heads, head_dim
  if cache_layout == "bskd":
    return {"k": (b, s, k, d), "v": (b, s, k, d)}
  return {"k": (b, k, d, s), "v": (b, k, s, d)}


def default_dtype(config, platform=None):
  """The cache's dtype: the compute dtype, except float32 on CPU.

  XLA:CPU runs the decode attention's batched products and the cache
  scatter in f32 whatever the operands' dtype, so a bf16 cache (mixed
  precision) would be converted whole, both ways, on every decode step
  (a large share of a bf16 step of workload b: `experiments/benchmarks/decode_profile.py`).
  The values written are the same bf16-computed keys and values.
  """
  platform = platform or jax.default_backend()
  return jnp.dtype(jnp.float32) if platform == "cpu" else jnp.dtype(config.dtype)


def init(config, batch: int, slots: int, dtype=None, *, num_layers=None) -> dict:
  """An empty cache {"k", "v"}; with num_layers, stacked: [L, ...] arrays."""
  dtype = dtype or default_dtype(config)
  lead = () if num_layers is None else (num_layers,)
  return {name: jnp.zeros(lead + shape, dtype) for name, shape in shapes(
      layout(config), batch, slots, config.num_kv_heads, config.head_dim).items()}


def write(cache: dict, k_BxTxKxD, v_BxTxKxD, positions_BxT, cache_layout: str) -> dict:
  """The cache with token t of row b stored at slot positions_BxT[b, t].

  Positions past the capacity are dropped (rows that are done write there).
  """
  rows_Bx1 = jnp.arange(k_BxTxKxD.shape[0])[:, None]
  k_BxTxKxD, v_BxTxKxD = (x.astype(cache["k"].dtype) for x in (k_BxTxKxD, v_BxTxKxD))
  if cache_layout == "bskd":
    return {"k": cache["k"].at[rows_Bx1, positions_BxT].set(k_BxTxKxD, mode="drop"),
            "v": cache["v"].at[rows_Bx1, positions_BxT].set(v_BxTxKxD, mode="drop")}
  # advanced indices (rows, positions) on axes 0 and 3 (k) or 0 and 2 (v) are split by
  # slices, so the updates are indexed [B, T, ...remaining axes in order]
  return {"k": cache["k"].at[rows_Bx1, :, :, positions_BxT].set(k_BxTxKxD, mode="drop"),
          "v": cache["v"].at[rows_Bx1, :, positions_BxT].set(v_BxTxKxD, mode="drop")}


def as_bskd(cache: dict, cache_layout: str):
  """(k, v) as [B, S, K, D] (for "transposed", a transposed copy: used when a chunk
  is prefilled onto an existing cache, once per appended chunk, and in tests)."""
  if cache_layout == "bskd":
    return cache["k"], cache["v"]
  return jnp.transpose(cache["k"], (0, 3, 1, 2)), jnp.transpose(cache["v"], (0, 2, 1, 3))
