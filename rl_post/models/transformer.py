"""The decoder-only transformer and its pure functional interface.

The model is an NNX module, but every caller uses it in functional form:
parameters are a plain nested dict of arrays (`params`), and `apply` /
`apply_with_cache` merge them into the module inside the (jitted) caller.
Blocks are stacked along a leading `layers` axis and applied with
`jax.lax.scan`, so compile time does not grow with depth.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from rl_post.models import kv_cache
from rl_post.models.config import ModelConfig
from rl_post.models.layers import Block, Embed, RMSNorm
from rl_post.parallel import ring_attention


def _stacked_blocks(config: ModelConfig, rngs: nnx.Rngs) -> Block:
  """One Block module whose parameters carry a leading [L] axis."""
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: Block(config, rngs=nnx.Rngs(0))))
  keys = jax.random.split(rngs.params(), config.num_layers)
  state = jax.vmap(lambda key: nnx.split(Block(config, rngs=nnx.Rngs(params=key)))[1])(keys)
  return nnx.merge(graphdef, state)


class Transformer(nnx.Module):
  """Embedding -> L x Block -> RMSNorm -> logits."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embed = Embed(config, rngs=rngs)
    self.blocks = _stacked_blocks(config, rngs)
    self.final_norm = RMSNorm(config.embed_dim, eps=config.norm_eps,
                              param_dtype=config.param_dtype, rngs=rngs)
    if not config.tie_embeddings:
      self.lm_head = nnx.Param(
          nnx.initializers.lecun_normal()(rngs.params(), (config.embed_dim, config.vocab_size),
                                          config.param_dtype),
          logical_axes=("embed", "vocab"))

  def __call__(self, tokens_BxT, positions_BxT, *, segment_ids_BxT=None, cache=None,
               context_mesh=None, lora=None):
    if context_mesh is not None:
      # Lay tokens out once in the load-balanced ring order; undo it on the logits.
      perm = ring_attention.layout_permutation(self.config.context_layout, tokens_BxT.shape[1],
                                               context_mesh.shape["context"])
      tokens_BxT, positions_BxT = tokens_BxT[:, perm], positions_BxT[:, perm]
      if segment_ids_BxT is not None:
        segment_ids_BxT = segment_ids_BxT[:, perm]
    x_BxTxE = self.embed(tokens_BxT)
    block_graphdef, block_state = nnx.split(self.blocks)

    def layer(x, layer_inputs):
      layer_state, layer_cache, layer_lora = layer_inputs
      block = nnx.merge(block_graphdef, layer_state)
      return block(x, positions_BxT, segment_ids_BxT=segment_ids_BxT, cache=layer_cache,
                   context_mesh=context_mesh, lora=layer_lora)

    x_BxTxE, new_cache = jax.lax.scan(layer, x_BxTxE, (block_state, cache, lora))
    logits = self.logits(x_BxTxE)
    if context_mesh is not None:
      logits = logits[:, ring_attention.inverse_permutation(perm)]
    return logits, new_cache

  def logits(self, x_BxTxE):
    """Final norm and output projection: float32 logits_BxTxV."""
    x_BxTxE = self.final_norm(x_BxTxE)
    if self.config.tie_embeddings:
      logits = self.embed.attend(x_BxTxE)
    else:
      logits = jnp.einsum("bte,ev->btv", x_BxTxE, self.lm_head[...].astype(x_BxTxE.dtype),
                          preferred_element_type=jnp.float32)
    return logits.astype(jnp.float32)


@functools.lru_cache(maxsize=32)
def graphdef(config: ModelConfig):
  """The (cached) NNX graph definition for `config`."""
  return nnx.split(nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0))))[0]


def abstract_params(config: ModelConfig):
  """Params as a nested dict of `jax.ShapeDtypeStruct` (no allocation)."""
  return jax.eval_shape(lambda: init_params(config, jax.random.key(0)))


def param_logical_axes(config: ModelConfig):
  """Nested dict, same structure as params, of logical axis-name tuples."""
  abstract_model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
  state = nnx.split(abstract_model, nnx.Param)[1]

  def axes(path, variable):
    names = tuple(variable.get_metadata()["logical_axes"])
    return ("layers",) + names if path[0] == "blocks" else names

  flat = {path: axes(path, v) for path, v in nnx.to_flat_state(state)}
  return nnx.to_pure_dict(nnx.from_flat_state(flat))


def init_params(config: ModelConfig, rng):
  """Freshly initialised params (nested dict of arrays)."""
  model = Transformer(config, rngs=nnx.Rngs(params=rng))
  return nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])


def default_positions(tokens_BxT):
  return jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1], dtype=jnp.int32), tokens_BxT.shape)


def apply(config: ModelConfig, params, tokens_BxT, *, positions=None, segment_ids=None,
          context_mesh=None, lora=None):
  """Pure forward pass: logits_BxTxV (float32).

  Args:
    config: the model config.
    params: nested dict of arrays (from `init_params` or `hf.load`).
    tokens_BxT: int32 token ids.
    positions: optional [B, T] positions (default 0..T-1).
    segment_ids: optional [B, T] packed-sequence ids.
    context_mesh: optional mesh whose `context` axis (> 1) splits the
      sequence: attention becomes ring attention; inputs and logits stay in
      natural token order (see `rl_post.parallel.mesh.context_mesh`).
    lora: optional stacked `rl_post.models.lora.Adapters` (`lora.for_model`):
      `params` are then the frozen base and the adapters' update is added at
      every targeted matmul.
  """
  positions = default_positions(tokens_BxT) if positions is None else positions
  model = nnx.merge(graphdef(config), params)
  logits, _ = model(tokens_BxT, positions, segment_ids_BxT=segment_ids,
                    context_mesh=context_mesh, lora=lora)
  return logits


def init_cache(config: ModelConfig, batch_size: int, max_len: int, dtype=None):
  """An empty KV cache: {"k", "v"} of [L, ...] arrays in `kv_cache.layout(config)`."""
  return kv_cache.init(config, batch_size, max_len, dtype, num_layers=config.num_layers)


def apply_with_cache(config: ModelConfig, params, tokens_BxT, positions_BxT, cache):
  """Forward that reads and writes the KV cache: (logits_BxTxV, new_cache).

  With T > 1 this is a prefill from slot 0; with T == 1, one decode step that
  writes slot positions_BxT[:, 0] and attends to slots <= it.
  """
  model = nnx.merge(graphdef(config), params)
  return model(tokens_BxT, positions_BxT, cache=cache)


# --- Decoding layout: one KV cache per layer, per-layer weights split once. ---


@functools.lru_cache(maxsize=32)
def block_graphdef(config: ModelConfig):
  """The (cached) NNX graph definition of one transformer block."""
  return nnx.split(nnx.eval_shape(lambda: Block(config, rngs=nnx.Rngs(0))))[0]


def unstack_blocks(params):
  """Per-layer block params, a list of L dicts sliced once from the stack.

  Call outside a decode loop: the loop then reads each layer's weights
  in place instead of slicing the stacked array on every step.
  """
  num_layers = jax.tree.leaves(params["blocks"])[0].shape[0]
  return [jax.tree.map(lambda x, i=i: x[i], params["blocks"]) for i in range(num_layers)]


def init_layer_caches(config: ModelConfig, batch_size: int, max_len: int, dtype=None):
  """An empty per-layer KV cache: a list of L {"k", "v"} dicts (`kv_cache.layout`)."""
  return [kv_cache.init(config, batch_size, max_len, dtype) for _ in range(config.num_layers)]


def head_matrix(config: ModelConfig, params):
  """The output projection as [E, V] (the tied embedding transposed, a copy).

  A decode loop computes it once per rollout: read in the tied head's own
  [V, E] layout, the logits matmul was the costliest op of a CPU decode
  step (`experiments/benchmarks/decode_profile.py`).
  """
  if config.tie_embeddings:
    return jnp.transpose(params["embed"]["embedding"])
  return params["lm_head"]


def decode_weights(config: ModelConfig, params) -> dict:
  """{"layers": unstack_blocks(params), "head_ExV": head_matrix(config, params)}.

  What a decode loop reads on every step, laid out once per rollout (both
  are copies: ~1x the params) and passed to every prefill/decode call of it.
  Matrices are cast to the compute dtype here (bf16 under mixed precision),
  so the loop neither casts them on each step nor reads f32 weights; norm
  scales keep their dtype (the norms compute in f32).
  """
  dtype = jnp.dtype(config.dtype)
  to_compute = lambda x: x.astype(dtype) if x.ndim >= 2 else x
  return {"layers": jax.tree.map(to_compute, unstack_blocks(params)),
          "head_ExV": head_matrix(config, params).astype(dtype)}


def apply_layers_with_cache(config: ModelConfig, params, layer_params, tokens_BxT,
                            positions_BxT, caches, *, logits_at_B=None, head_ExV=None):
  """Forward over per-layer caches: (logits_BxTxV, new_caches).

  Token t of row b is written at cache slot positions_BxT[b, t] and attends
  to every slot <= its position, so a multi-token chunk extends a cache
  that already holds earlier tokens (slots past a row's length may hold
  stale values; they are never read). T == 1 uses the decode kernel.

  Args:
    config: the model config.
    params: full params (embedding, final norm, head are read from it).
    layer_params: `unstack_blocks(params)`.
    tokens_BxT, positions_BxT: int32 chunk and its absolute positions.
    caches: `init_layer_caches(...)` or a previous result.
    logits_at_B: optional chunk index per row; then only that position's
      logits are computed (logits_Bx1xV), e.g. a prompt's last token.
    head_ExV: optional `head_matrix(config, params)`, for callers that
      decode many steps with the same params.
  """
  model = nnx.merge(graphdef(config), params)
  x_BxTxE = model.embed(tokens_BxT)
  extend = tokens_BxT.shape[1] > 1
  new_caches = []
  for layer_param, cache in zip(layer_params, caches):
    block = nnx.merge(block_graphdef(config), layer_param)
    x_BxTxE, cache = block(x_BxTxE, positions_BxT, cache=cache, cache_extend=extend)
    new_caches.append(cache)
  if logits_at_B is not None:
    x_BxTxE = x_BxTxE[jnp.arange(x_BxTxE.shape[0]), logits_at_B][:, None]
  if head_ExV is not None:
    x_BxTxE = model.final_norm(x_BxTxE)
    return jnp.einsum("bte,ev->btv", x_BxTxE, head_ExV.astype(x_BxTxE.dtype),
                      preferred_element_type=jnp.float32), new_caches
  return model.logits(x_BxTxE), new_caches
