"""The device side of decoding: prefill, decode loop, append, truncate.

All are jitted pure functions (`*_impl` unjitted, for callers that jit
with explicit shardings, see `rl_post.sampling.sharded`) over a `DecodeState`.
The KV cache is a list of per-layer buffers (layout: `models.kv_cache`)
carried by the decode `while_loop`
and updated in place (one scatter per layer per step); per-layer weights
and the [E, V] output head are laid out once (`models.decode_weights`),
outside the loop, and can be shared by all calls of a rollout.

Layout: row b of `tokens_BxT` is its prompt followed by its response
(sampled and appended tokens), right-padded; `lengths_B[b]` tokens are
real and also fill cache slots [0, lengths_B[b]). Slot t holds position t.
"""

import collections

import flax.struct
import jax
import jax.numpy as jnp

from rl_post import models
from rl_post.sampling import controls
from rl_post.sampling.controls import SamplingConfig

# Number of times each jitted function was traced (== compiled) in this
# process; tests use it to prove length bucketing avoids recompiles.
TRACE_COUNTS = collections.Counter()


@flax.struct.dataclass
class DecodeState:
  """Everything needed to continue decoding a batch."""
  caches: list              # L x {"k", "v"}: [B, S, K, D]
  tokens_BxT: jax.Array     # prompt + response + padding (T == S)
  logp_BxT: jax.Array       # behaviour log-prob of sampled tokens, 0 elsewhere
  trunc_logz_BxT: jax.Array  # log mass kept by truncation at sampled tokens
  mask_BxT: jax.Array       # 1 on response tokens (sampled or appended)
  loss_mask_BxT: jax.Array  # 1 on sampled tokens only (trainable)
  prompt_lens_B: jax.Array
  lengths_B: jax.Array      # real tokens per row (next write slot)
  new_B: jax.Array          # tokens sampled in the current call
  budget_B: jax.Array       # max tokens to sample in the current call
  done_B: jax.Array
  stopped_B: jax.Array      # ended on a stop token or stop string
  logits_BxV: jax.Array     # next-token logits after lengths_B tokens
  seeds_B: jax.Array        # per-row sampling seeds


def _row_done(state: DecodeState):
  capacity = state.tokens_BxT.shape[1]
  return state.done_B | (state.new_B >= state.budget_B) | (state.lengths_B >= capacity)


def _stop_ids(config: SamplingConfig):
  return jnp.asarray(sorted(config.stop_token_ids) or [-1], jnp.int32)


def prefill_impl(params, prompts_BxP, prompt_lens_B, seeds_B, budget_B, weights=None, *,
                 model_config, capacity: int, group_size: int, pad_id: int) -> DecodeState:
  """Prefills each distinct prompt once; rows b*G..b*G+G-1 share prompt b.

  The cache of a group's prompt is computed from its first row and
  broadcast to the G rows (which must hold the same prompt).
  weights: optional `models.decode_weights(model_config, params)`, shared
  with the decode calls that follow (laid out here otherwise).
  """
  TRACE_COUNTS["prefill"] += 1
  batch, prompt_len = prompts_BxP.shape
  src_prompts, src_lens = prompts_BxP[::group_size], prompt_lens_B[::group_size]
  caches = models.init_layer_caches(model_config, src_prompts.shape[0], capacity)
  positions = jnp.broadcast_to(jnp.arange(prompt_len, dtype=jnp.int32), src_prompts.shape)
  if weights is None:
    weights = models.decode_weights(model_config, params)
  logits, caches = models.apply_layers_with_cache(
      model_config, params, weights["layers"], src_prompts, positions, caches,
      logits_at_B=src_lens - 1, head_ExV=weights["head_ExV"])
  repeat = lambda x: jnp.repeat(x, group_size, axis=0)
  prompt_BxP = jnp.where(jnp.arange(prompt_len)[None] < prompt_lens_B[:, None], prompts_BxP,
                         pad_id)
  tokens = jnp.full((batch, capacity), pad_id, jnp.int32).at[:, :prompt_len].set(prompt_BxP)
  zeros_f, zeros_i = jnp.zeros((batch, capacity), jnp.float32), jnp.zeros((batch, capacity),
                                                                          jnp.int32)
  return DecodeState(
      caches=jax.tree.map(repeat, caches), tokens_BxT=tokens, logp_BxT=zeros_f,
      trunc_logz_BxT=zeros_f, mask_BxT=zeros_i, loss_mask_BxT=zeros_i,
      prompt_lens_B=prompt_lens_B, lengths_B=prompt_lens_B, new_B=jnp.zeros(batch, jnp.int32),
      budget_B=budget_B, done_B=budget_B <= 0, stopped_B=jnp.zeros(batch, bool),
      logits_BxV=repeat(logits[:, 0]), seeds_B=seeds_B)


def _call_uniforms(seeds_B, capacity: int):
  """`controls.row_uniforms` of every row at every slot: [B, capacity].

  One batched draw per decode call instead of one small one per step (the
  values are the same, so tokens do not depend on how a rollout is split
  into calls).
  """
  batch = seeds_B.shape[0]
  slots_BxT = jnp.broadcast_to(jnp.arange(capacity, dtype=jnp.int32), (batch, capacity))
  seeds_BxT = jnp.broadcast_to(seeds_B[:, None], (batch, capacity))
  return controls.row_uniforms(seeds_BxT.reshape(-1), slots_BxT.reshape(-1)).reshape(
      batch, capacity)


def decode_impl(params, state: DecodeState, max_steps, min_done=None, weights=None, *,
                model_config, config: SamplingConfig, pad_id: int) -> DecodeState:
  """Samples until `min_done` rows (default all) are done or `max_steps` steps ran.

  weights: optional `models.decode_weights(model_config, params)`, for
  callers that decode in several calls (laid out here otherwise).
  """
  TRACE_COUNTS["decode"] += 1
  if weights is None:
    weights = models.decode_weights(model_config, params)
  stop_ids = _stop_ids(config)
  rows_B = jnp.arange(state.lengths_B.shape[0])
  u_BxT = None if config.greedy else _call_uniforms(state.seeds_B, state.tokens_BxT.shape[1])

  min_done = rows_B.shape[0] if min_done is None else min_done

  def cond(carry):
    i, s = carry
    return (i < max_steps) & (jnp.sum(s.done_B) < min_done) & ~jnp.all(s.done_B)

  def body(carry):
    i, s = carry
    active_B = ~s.done_B
    pos_B = s.lengths_B
    u_B = None if u_BxT is None else u_BxT[rows_B, jnp.minimum(pos_B, u_BxT.shape[1] - 1)]
    token_B, logp_B, logz_B = controls.choose(s.logits_BxV, s.seeds_B, pos_B, config, u_B)
    token_B = jnp.where(active_B, token_B, pad_id)
    write_B = jnp.where(active_B, pos_B, s.tokens_BxT.shape[1])  # out of range: dropped
    put = lambda buf, v: buf.at[rows_B, write_B].set(v, mode="drop")
    logits, caches = models.apply_layers_with_cache(
        model_config, params, weights["layers"], token_B[:, None], pos_B[:, None], s.caches,
        head_ExV=weights["head_ExV"])
    stopped_B = active_B & jnp.isin(token_B, stop_ids)
    s = s.replace(
        caches=caches, tokens_BxT=put(s.tokens_BxT, token_B), logp_BxT=put(s.logp_BxT, logp_B),
        trunc_logz_BxT=put(s.trunc_logz_BxT, logz_B), mask_BxT=put(s.mask_BxT, 1),
        loss_mask_BxT=put(s.loss_mask_BxT, 1), lengths_B=s.lengths_B + active_B,
        new_B=s.new_B + active_B, stopped_B=s.stopped_B | stopped_B,
        done_B=s.done_B | stopped_B,
        logits_BxV=jnp.where(active_B[:, None], logits[:, 0], s.logits_BxV))
    return i + 1, s.replace(done_B=_row_done(s))

  state = state.replace(done_B=_row_done(state))
  return jax.lax.while_loop(cond, body, (jnp.int32(0), state))[1]


def append_impl(params, state: DecodeState, tokens_BxC, counts_B, resume_B, budget_B,
                weights=None, *, model_config, pad_id: int) -> DecodeState:
  """Appends counts_B[b] tokens to row b (not trainable) and re-opens rows.

  The chunk is prefilled onto the existing cache after each row's last
  token, which is fed again (same slot, same values) so the next-token
  logits are exact even for rows cut by a stop string. Rows with
  resume_B get a fresh sampling budget and are no longer done.
  """
  TRACE_COUNTS["append"] += 1
  batch, chunk = tokens_BxC.shape
  rows_B = jnp.arange(batch)
  last_B = state.tokens_BxT[rows_B, state.lengths_B - 1]
  tokens_BxC = jnp.where(jnp.arange(chunk)[None] < counts_B[:, None], tokens_BxC, pad_id)
  feed_Bx1C = jnp.concatenate([last_B[:, None], tokens_BxC], axis=1)
  positions = state.lengths_B[:, None] - 1 + jnp.arange(chunk + 1, dtype=jnp.int32)[None]
  if weights is None:
    weights = models.decode_weights(model_config, params)
  logits, caches = models.apply_layers_with_cache(
      model_config, params, weights["layers"], feed_Bx1C, positions, state.caches,
      logits_at_B=counts_B, head_ExV=weights["head_ExV"])
  slots_BxC = jnp.where(jnp.arange(chunk)[None] < counts_B[:, None], positions[:, 1:],
                        state.tokens_BxT.shape[1])
  rows_Bx1 = rows_B[:, None]
  return state.replace(
      caches=caches, tokens_BxT=state.tokens_BxT.at[rows_Bx1, slots_BxC].set(tokens_BxC,
                                                                             mode="drop"),
      mask_BxT=state.mask_BxT.at[rows_Bx1, slots_BxC].set(1, mode="drop"),
      lengths_B=state.lengths_B + counts_B, logits_BxV=logits[:, 0],
      new_B=jnp.where(resume_B, 0, state.new_B),
      budget_B=jnp.where(resume_B, budget_B, state.budget_B),
      done_B=jnp.where(resume_B, False, state.done_B),
      stopped_B=jnp.where(resume_B, False, state.stopped_B))


def truncate_impl(state: DecodeState, keep_lens_B, hit_B, *, pad_id: int) -> DecodeState:
  """Cuts rows with hit_B after keep_lens_B tokens and marks them stopped."""
  TRACE_COUNTS["truncate"] += 1
  cut_BxT = hit_B[:, None] & (jnp.arange(state.tokens_BxT.shape[1])[None] >=
                              keep_lens_B[:, None])
  zero = lambda x: jnp.where(cut_BxT, 0, x)
  return state.replace(
      tokens_BxT=jnp.where(cut_BxT, pad_id, state.tokens_BxT), logp_BxT=zero(state.logp_BxT),
      trunc_logz_BxT=zero(state.trunc_logz_BxT), mask_BxT=zero(state.mask_BxT),
      loss_mask_BxT=zero(state.loss_mask_BxT),
      lengths_B=jnp.where(hit_B, keep_lens_B, state.lengths_B),
      done_B=state.done_B | hit_B, stopped_B=state.stopped_B | hit_B)


def insert_rows_impl(state: DecodeState, new: DecodeState, slots_R) -> DecodeState:
  """Writes the R rows of `new` into rows slots_R of `state` (slot B: skipped)."""
  TRACE_COUNTS["insert_rows"] += 1
  return jax.tree.map(lambda old, x: old.at[slots_R].set(x, mode="drop"), state, new)


def take_rows_impl(state: DecodeState, rows_R) -> DecodeState:
  """The rows rows_R of `state` (a narrower or reordered batch)."""
  TRACE_COUNTS["take_rows"] += 1
  return jax.tree.map(lambda x: x[rows_R], state)


prefill = jax.jit(prefill_impl, static_argnames=("model_config", "capacity", "group_size",
                                                  "pad_id"))
decode_weights = jax.jit(models.decode_weights, static_argnames=("config",))
decode = jax.jit(decode_impl, static_argnames=("model_config", "config", "pad_id"),
                 donate_argnames=("state",))
append = jax.jit(append_impl, static_argnames=("model_config", "pad_id"),
                 donate_argnames=("state",))
truncate = jax.jit(truncate_impl, static_argnames=("pad_id",), donate_argnames=("state",))
insert_rows = jax.jit(insert_rows_impl, donate_argnames=("state",))
take_rows = jax.jit(take_rows_impl)
