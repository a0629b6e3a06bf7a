"""Sharded rollouts: prefill, decode and reference log-probs with explicit shardings.

The decode state gets logical axis names from the same rules table as the
parameters: KV caches are (cache_batch, cache_length, cache_kv_heads,
head_dim) in the order of their layout (`rl_post.models.kv_cache`) -- batch
over data/fsdp, kv heads over tensor by default -- and
per-row buffers are (batch, length). Decode attention is
`rl_post.kernels.attention.decode_attention` inside the model; its XLA
implementation partitions under jit like any einsum, so no shard_map is
needed on CPU (the Pallas kernels are per-device and are not used here).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from rl_post import models
from rl_post.models import kv_cache
from rl_post.parallel import sharding
from rl_post.models.logprobs import sequence_logprobs
from rl_post.sampling import engine
from rl_post.sampling.controls import SamplingConfig
from rl_post.sampling.sampler import budget, rollout_of


def state_logical_axes(model_config) -> engine.DecodeState:
  """Logical axis names of every DecodeState field (caches in their layout)."""
  row_t, row = ("batch", "length"), ("batch",)
  cache_axes = kv_cache.logical_axes(kv_cache.layout(model_config))
  return engine.DecodeState(
      caches=[dict(cache_axes) for _ in range(model_config.num_layers)],
      tokens_BxT=row_t, logp_BxT=row_t, trunc_logz_BxT=row_t, mask_BxT=row_t,
      loss_mask_BxT=row_t, prompt_lens_B=row, lengths_B=row, new_B=row, budget_B=row,
      done_B=row, stopped_B=row, logits_BxV=("batch", "vocab"), seeds_B=row)


def _named(axes_tree, mesh, rules):
  is_axes = lambda x: isinstance(x, tuple) and all(isinstance(a, (str, type(None))) for a in x)
  return jax.tree.map(
      lambda axes: jax.sharding.NamedSharding(
          mesh, sharding.logical_to_spec(axes, rules, mesh.axis_names)),
      axes_tree, is_leaf=is_axes)


class ShardedRollout:
  """Static-path generation jitted with explicit in/out shardings on `mesh`."""

  def __init__(self, model_config, config: SamplingConfig, mesh, rules, *, capacity: int,
               group_size: int = 1, eos_id: int | None = None, pad_id: int = 0):
    self.model_config, self.config = model_config, config
    params_sh = sharding.tree_shardings(models.param_logical_axes(model_config),
                                        models.abstract_params(model_config), mesh, rules)
    state_sh = _named(state_logical_axes(model_config), mesh, rules)
    rows, rows_t = (sharding.batch_sharding(mesh, rules, n) for n in (1, 2))
    scalar = sharding.replicated(mesh)
    stop = config.stop_token_ids | ({int(eos_id)} if eos_id is not None and eos_id >= 0
                                    else set())
    device_config = dataclasses.replace(config.device_key(), stop_token_ids=frozenset(stop))
    self.params_sharding, self.state_sharding = params_sh, state_sh
    self.row_sharding, self.row_t_sharding = rows, rows_t
    self._prefill = jax.jit(
        functools.partial(engine.prefill_impl, model_config=model_config, capacity=capacity,
                          group_size=group_size, pad_id=pad_id),
        in_shardings=(params_sh, rows_t, rows, rows, rows), out_shardings=state_sh)
    self._decode = jax.jit(
        functools.partial(engine.decode_impl, model_config=model_config, config=device_config,
                          pad_id=pad_id),
        in_shardings=(params_sh, state_sh, scalar, scalar), out_shardings=state_sh,
        donate_argnums=(1,))
    self.logprobs = jax.jit(
        lambda p, t: sequence_logprobs(model_config, p, t, config.temperature),
        in_shardings=(params_sh, rows_t), out_shardings=(rows_t, rows_t))

  def generate(self, params, prompts_BxP, prompt_lens_B, seeds_B, max_new_tokens=None):
    """A Rollout; prompts must already be padded to their final width."""
    batch = prompts_BxP.shape[0]
    state = self._prefill(params, jnp.asarray(prompts_BxP, jnp.int32),
                          jnp.asarray(prompt_lens_B, jnp.int32), jnp.asarray(seeds_B, jnp.int32),
                          budget(self.config, max_new_tokens, batch))
    capacity = state.tokens_BxT.shape[1]
    state = self._decode(params, state, jnp.int32(capacity), jnp.int32(batch))
    return rollout_of(state), state
