"""Rollouts: sample responses, optionally resume them after appended tokens.

Layout: prompts are right-padded, row b has `prompt_lens[b]` real tokens.
The output sequence of row b is its prompt followed directly by its
response, right-padded: the layout the trainer uses, so trainer log-probs
are a plain causal forward over `tokens_BxT`. The behaviour log-prob is
defined in `rl_post.sampling.controls`.

  rollout = generate(params, prompts, lens, rng, model_config=..., config=...,
                     eos_id=..., pad_id=..., group_size=G)
  rollout, state = generate(..., return_state=True)
  rollout, state = extend(params, state, rows=[0], tokens=[[5, 6, 7]], ...)

Prompt lengths and the cache capacity are bucketed (`length_buckets`), and
the per-call budget is a traced value, so batches of varied lengths reuse
compiled code.
"""

import dataclasses
from typing import Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rl_post.parallel import process_data
from rl_post.sampling import engine
from rl_post.sampling.controls import SamplingConfig, bucket

__all__ = ["Rollout", "SamplingConfig", "generate", "extend"]


@flax.struct.dataclass
class Rollout:
  tokens_BxT: jax.Array      # prompt + response + padding
  logp_BxT: jax.Array        # behaviour log-prob of each sampled token (0 elsewhere)
  trunc_logz_BxT: jax.Array  # log mass kept by top-k/p/min-p at sampled tokens (<= 0)
  mask_BxT: jax.Array        # 1 on response tokens (sampled or appended)
  loss_mask_BxT: jax.Array   # 1 on sampled tokens only: the trainable ones
  prompt_lens_B: jax.Array
  response_lens_B: jax.Array
  finished_B: jax.Array      # True if the response ended on a stop token/string


def rollout_of(state: engine.DecodeState) -> Rollout:
  return Rollout(tokens_BxT=state.tokens_BxT, logp_BxT=state.logp_BxT,
                 trunc_logz_BxT=state.trunc_logz_BxT, mask_BxT=state.mask_BxT,
                 loss_mask_BxT=state.loss_mask_BxT, prompt_lens_B=state.prompt_lens_B,
                 response_lens_B=state.mask_BxT.sum(axis=1), finished_B=state.stopped_B)


def _with_eos(config: SamplingConfig, eos_id) -> SamplingConfig:
  if eos_id is None or eos_id < 0:
    return config
  return dataclasses.replace(config, stop_token_ids=config.stop_token_ids | {int(eos_id)})


def budget(config: SamplingConfig, max_new_tokens, batch: int):
  """Per-row budgets [B] from None (the config's), an int, or a [B] array."""
  n = config.max_new_tokens if max_new_tokens is None else max_new_tokens
  n = np.broadcast_to(np.asarray(n, np.int32), (batch,))
  if n.min() < 1 or n.max() > config.max_new_tokens:
    raise ValueError(f"max_new_tokens must be in [1, config.max_new_tokens="
                     f"{config.max_new_tokens}], got [{n.min()}, {n.max()}]")
  return jnp.asarray(n)


def row_seeds(rng, batch: int):
  """Per-row int32 seeds drawn from a PRNG key."""
  return jax.random.randint(rng, (batch,), 0, np.iinfo(np.int32).max, jnp.int32)


def pad_prompts(prompts_BxP, prompt_lens_B, config: SamplingConfig, pad_id: int):
  # (multi-host: each process built its rows; the ids are gathered to bucket and check them)
  prompts_BxP, lens = (np.asarray(x) for x in process_data.fetch((prompts_BxP, prompt_lens_B)))
  if prompts_BxP.ndim != 2 or lens.shape != prompts_BxP.shape[:1]:
    raise ValueError(f"prompts must be [B, P] with prompt_lens [B]; got {prompts_BxP.shape} "
                     f"and {lens.shape}")
  if lens.min() < 1 or lens.max() > prompts_BxP.shape[1]:
    raise ValueError(f"prompt_lens must be in [1, {prompts_BxP.shape[1]}], got "
                     f"[{lens.min()}, {lens.max()}]")
  width = bucket(int(lens.max()), config.length_buckets)
  out = np.full((prompts_BxP.shape[0], width), pad_id, np.int32)
  keep = min(width, prompts_BxP.shape[1])
  out[:, :keep] = prompts_BxP[:, :keep]
  return out, lens.astype(np.int32)


def _stop_string_cut(tokens, start, end, response_start, detokenize, stop_strings, tail_tokens):
  """Index after the first token (in [start, end)) completing a stop string, or None.

  The text checked for token j is the detokenized window of up to
  `tail_tokens` tokens ending at j, never reaching before `response_start`,
  so a match that spans two check intervals is found.
  """
  for j in range(start, end):
    text = detokenize([int(t) for t in tokens[max(response_start, j + 1 - tail_tokens):j + 1]])
    if any(s in text for s in stop_strings):
      return j + 1
  return None


def stop_string_cuts(tokens_BxT, before_B, after_B, response_start_B, rows, detokenize,
                     stop_strings):
  """(keep_lens_B, hit_B): where to cut rows whose new tokens complete a stop string.

  Only tokens [before_B[b], after_B[b]) of the given rows are checked;
  the first completed match wins. Shared by the static and continuous
  paths, so both cut at the same token.
  """
  keep, hit = np.array(after_B), np.zeros(len(after_B), bool)
  tail = max(len(s) for s in stop_strings) + 8
  for b in rows:
    if after_B[b] <= before_B[b]:
      continue
    cut = _stop_string_cut(tokens_BxT[b], max(before_B[b], response_start_B[b]), after_B[b],
                           response_start_B[b], detokenize, stop_strings, tail)
    if cut is not None:
      keep[b], hit[b] = cut, True
  return keep, hit


def _run(params, state, config, model_config, pad_id, detokenize, weights=None):
  """Decodes to the end; with stop strings, in chunks checked on the host."""
  device_config = config.device_key()
  capacity = state.tokens_BxT.shape[1]
  if not config.stop_strings:
    return engine.decode(params, state, jnp.int32(capacity), None, weights,
                         model_config=model_config, config=device_config, pad_id=pad_id)
  if detokenize is None:
    raise ValueError("SamplingConfig.stop_strings needs a `detokenize` callable")
  # process_data.fetch: the host check sees every row on every process (multi-host)
  call_start = np.asarray(process_data.fetch(state.lengths_B))
  while True:
    before = np.asarray(process_data.fetch(state.lengths_B))
    state = engine.decode(params, state, jnp.int32(config.stop_check_interval), None, weights,
                          model_config=model_config, config=device_config, pad_id=pad_id)
    tokens, after, done = process_data.fetch((state.tokens_BxT, state.lengths_B, state.done_B))
    keep, hit = stop_string_cuts(tokens, before, after, call_start, range(len(after)),
                                 detokenize, config.stop_strings)
    if hit.any():
      state = engine.truncate(state, jnp.asarray(keep), jnp.asarray(hit), pad_id=pad_id)
    if bool(np.all(done | hit)):
      return state


def generate(params, prompts_BxP, prompt_lens_B, rng, *, model_config,
             config: SamplingConfig, eos_id: int | None, pad_id: int, group_size: int = 1,
             seeds_B=None, max_new_tokens: int | None = None,
             detokenize: Callable[[list[int]], str] | None = None,
             return_state: bool = False):
  """Samples one response per row; rows stop on a stop token/string or budget.

  Args:
    params: model params (may be sharded; the batch should be too).
    prompts_BxP: right-padded int32 prompts.
    prompt_lens_B: number of real tokens per row (>= 1).
    rng: PRNG key for the per-row seeds (ignored when seeds_B is given).
    eos_id: added to config.stop_token_ids (None or < 0: none).
    group_size: G; rows b*G..b*G+G-1 hold the same prompt, prefilled once.
    seeds_B: optional per-row int32 seeds (same seed, same tokens).
    max_new_tokens: this call's budget (int or per-row [B]), <= config's.
    detokenize: token ids -> text; required with stop strings.
    return_state: also return the DecodeState for `extend`.
  Returns:
    A Rollout with T = bucketed prompt width + config.max_new_tokens
    (and the state when return_state).
  """
  batch = np.shape(prompts_BxP)[0]
  if group_size < 1 or batch % group_size:
    raise ValueError(f"batch {batch} must be a positive multiple of group_size {group_size}")
  prompts, lens = pad_prompts(prompts_BxP, prompt_lens_B, config, pad_id)
  if group_size > 1:
    grouped = prompts.reshape(batch // group_size, group_size, -1)
    if not (grouped == grouped[:, :1]).all() or not (
        lens.reshape(-1, group_size) == lens[::group_size, None]).all():
      raise ValueError("group_size > 1 needs the G rows of each group to hold the same prompt")
  seeds = row_seeds(rng, batch) if seeds_B is None else jnp.asarray(seeds_B, jnp.int32)
  weights = engine.decode_weights(model_config, params)  # shared by prefill and decode
  state = engine.prefill(params, jnp.asarray(prompts), jnp.asarray(lens), seeds,
                         budget(config, max_new_tokens, batch), weights,
                         model_config=model_config,
                         capacity=prompts.shape[1] + config.max_new_tokens,
                         group_size=group_size, pad_id=pad_id)
  state = _run(params, state, _with_eos(config, eos_id), model_config, pad_id, detokenize,
               weights)
  return (rollout_of(state), state) if return_state else rollout_of(state)


def extend(params, state: engine.DecodeState, rows: Sequence[int],
           tokens: Sequence[Sequence[int]], *, model_config, config: SamplingConfig,
           eos_id: int | None, pad_id: int, max_new_tokens: int | None = None,
           detokenize: Callable[[list[int]], str] | None = None):
  """Appends tokens[i] to row rows[i] (not trainable) and resumes those rows.

  Other rows are left as they are. Returns (rollout, state).
  """
  batch, capacity = state.tokens_BxT.shape
  if len(rows) != len(tokens):
    raise ValueError(f"got {len(rows)} rows but {len(tokens)} token lists")
  if len(set(rows)) != len(rows) or any(not 0 <= r < batch for r in rows):
    raise ValueError(f"rows must be distinct indices in [0, {batch}), got {list(rows)}")
  chunk = bucket(max([len(t) for t in tokens] + [1]), config.length_buckets)
  tokens_BxC = np.full((batch, chunk), pad_id, np.int32)
  counts, resume = np.zeros(batch, np.int32), np.zeros(batch, bool)
  for r, toks in zip(rows, tokens):
    tokens_BxC[r, :len(toks)], counts[r], resume[r] = toks, len(toks), True
  lengths = np.asarray(process_data.fetch(state.lengths_B))
  over = np.nonzero(lengths + counts + resume > capacity)[0]
  if over.size:
    raise ValueError(f"rows {over.tolist()} would exceed the cache capacity {capacity} "
                     "(generate with a larger max_new_tokens)")
  weights = engine.decode_weights(model_config, params)  # shared by append and decode
  state = engine.append(params, state, jnp.asarray(tokens_BxC), jnp.asarray(counts),
                        jnp.asarray(resume), budget(config, max_new_tokens, batch), weights,
                        model_config=model_config, pad_id=pad_id)
  state = _run(params, state, _with_eos(config, eos_id), model_config, pad_id, detokenize,
               weights)
  return rollout_of(state), state
