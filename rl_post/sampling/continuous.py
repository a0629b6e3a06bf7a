"""Continuous batching: a fixed set of decode slots refilled as rows finish.

The static path runs every row until the longest one ends; here, as soon
as enough slots are done (`refill_fraction` of them, or all when nothing
waits), the finished rows are harvested and waiting requests take their
slots. Waiting requests are prefilled ahead in batches of `num_slots`
(one prefill per batch, as efficient as the static path's; the pool holds
at most one such batch) and moved into free slots as these open.
Decoding uses the same jitted step as the static path and draws with
per-row seeds keyed by absolute position, so for the same seeds the
tokens equal the static path's (up to float reduction order when a
request is prefilled in a batch of a different width; see
docs/sampling.md). Stop token ids are checked on device; stop strings on
the host every `stop_check_interval` steps, with the static path's rule
(`sampler.stop_string_cuts`), so both cut at the same token.

Draining: once nothing waits, the batch shrinks (`shrink=True`): whenever
at most half of it is still running, the running rows are gathered into
a batch half as wide (16 -> 8 -> 4 ...). A decode step costs roughly in
proportion to its rows, so the last long responses no longer pay for the
finished ones. Each width compiles its own decode step once.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.sampling import engine
from rl_post.sampling.controls import SamplingConfig
from rl_post.sampling.sampler import Rollout, budget, pad_prompts, stop_string_cuts

_FIELDS = ("tokens_BxT", "logp_BxT", "trunc_logz_BxT", "mask_BxT", "loss_mask_BxT")
_HOST = _FIELDS + ("done_B", "stopped_B", "lengths_B", "prompt_lens_B")


@dataclasses.dataclass
class ContinuousStats:
  decode_calls: int = 0
  refills: int = 0         # times free slots were refilled
  prefill_calls: int = 0   # prefills of waiting requests (after the first fill)
  prefilled_rows: int = 0  # requests prefilled after the first fill
  shrinks: int = 0         # times the draining batch was halved


def _refill_width(n: int, num_slots: int) -> int:
  """Prefill batch width for n new rows: a power of two (few compiles)."""
  return min(num_slots, 1 << max(0, (n - 1).bit_length()))


class _Pool:
  """Waiting requests, prefilled ahead in batches of up to `num_slots`."""

  def __init__(self, waiting, prefill, num_slots, stats):
    self.waiting, self.prefill, self.num_slots, self.stats = list(waiting), prefill, num_slots, stats
    self.state, self.ids, self.next = None, [], 0

  def __len__(self):
    return len(self.waiting) + len(self.ids) - self.next

  def place(self, state, free_slots, owner):
    """Moves waiting requests into free_slots (in order); returns the new state."""
    placed = 0
    while placed < len(free_slots) and len(self):
      if self.next == len(self.ids):
        self.ids, self.waiting = self.waiting[:self.num_slots], self.waiting[self.num_slots:]
        self.state, self.next = self.prefill(np.array(self.ids)), 0
        self.stats.prefill_calls += 1
        self.stats.prefilled_rows += len(self.ids)
      take = min(len(free_slots) - placed, len(self.ids) - self.next)
      slots_R = np.full(self.state.lengths_B.shape[0], self.num_slots)  # num_slots: skipped
      slots_R[self.next:self.next + take] = free_slots[placed:placed + take]
      state = engine.insert_rows(state, self.state, jnp.asarray(slots_R))
      owner[free_slots[placed:placed + take]] = self.ids[self.next:self.next + take]
      self.next, placed = self.next + take, placed + take
    return state


def _shrink(state, owner):
  """(state, owner) narrowed to a power of two >= the running rows (padded with done rows)."""
  running, idle = np.nonzero(owner >= 0)[0], np.nonzero(owner < 0)[0]
  width = _refill_width(len(running), len(owner))
  rows = np.concatenate([running, idle[:width - len(running)]])
  return engine.take_rows(state, jnp.asarray(rows)), owner[rows]


def generate_continuous(params, prompts_NxP, prompt_lens_N, seeds_N, *, model_config,
                        config: SamplingConfig, num_slots: int, eos_id: int | None,
                        pad_id: int, max_new_tokens=None, refill_fraction: float = 0.25,
                        detokenize: Callable[[list[int]], str] | None = None,
                        shrink: bool = True):
  """Samples one response per request with `num_slots` decode slots.

  Args:
    prompts_NxP, prompt_lens_N: right-padded prompts of N requests.
    seeds_N: per-request int32 seeds (same seeds as the static path ->
      same tokens).
    num_slots: rows decoded together.
    max_new_tokens: None, an int, or per-request [N] budgets.
    refill_fraction: refill once this fraction of slots is free (while
      requests wait).
    detokenize: token ids -> text; required with stop strings.
    shrink: once nothing waits, halve the batch whenever at most half of
      it is running.
  Returns:
    (Rollout over the N requests in input order, ContinuousStats).
  """
  if num_slots < 1 or not 0.0 < refill_fraction <= 1.0:
    raise ValueError(f"need num_slots >= 1 and refill_fraction in (0, 1], got {num_slots}, "
                     f"{refill_fraction}")
  if config.stop_strings and detokenize is None:
    raise ValueError("SamplingConfig.stop_strings needs a `detokenize` callable")
  prompts, lens = pad_prompts(prompts_NxP, prompt_lens_N, config, pad_id)
  n, width = prompts.shape
  capacity = width + config.max_new_tokens
  budgets = np.asarray(budget(config, max_new_tokens, n))
  seeds = np.asarray(jax.device_get(seeds_N), np.int32)
  stop_config = config.device_key()
  if eos_id is not None and eos_id >= 0:
    stop_config = dataclasses.replace(stop_config,
                                      stop_token_ids=stop_config.stop_token_ids | {int(eos_id)})
  kw = dict(model_config=model_config, pad_id=pad_id)
  steps_per_call = config.stop_check_interval if config.stop_strings else capacity

  def prefill(ids):
    r = _refill_width(len(ids), num_slots)
    take = np.concatenate([ids, np.full(r - len(ids), ids[0])]).astype(int)
    return engine.prefill(params, jnp.asarray(prompts[take]), jnp.asarray(lens[take]),
                          jnp.asarray(seeds[take]), jnp.asarray(budgets[take]), weights,
                          capacity=capacity, group_size=1, **kw)

  weights = engine.decode_weights(model_config, params)  # once, not per prefill/decode call
  first = list(range(min(num_slots, n)))
  state = prefill(np.array(first))
  if len(first) < num_slots or state.lengths_B.shape[0] != num_slots:
    empty = jax.tree.map(lambda x: jnp.zeros((num_slots,) + x.shape[1:], x.dtype), state)
    empty = empty.replace(done_B=jnp.ones(num_slots, bool))
    slots = np.arange(state.lengths_B.shape[0])
    slots[len(first):] = num_slots
    state = engine.insert_rows(empty, state, jnp.asarray(slots))
  owner = np.full(num_slots, -1)
  owner[:len(first)] = first
  stats = ContinuousStats()
  pool = _Pool(range(len(first), n), prefill, num_slots, stats)
  results = {f: np.zeros((n, capacity), np.float32 if "logp" in f or "logz" in f else np.int32)
             for f in _FIELDS}
  results["stopped"] = np.zeros(n, bool)
  min_free = max(1, int(num_slots * refill_fraction))
  while (owner >= 0).any():
    width = len(owner)
    if len(pool):
      need = min(min_free, len(pool))
    else:  # draining: run to the end, or until the batch can be halved
      need = width - width // 2 if shrink and width > 1 else width
    before = np.asarray(jax.device_get(state.lengths_B)) if config.stop_strings else None
    state = engine.decode(params, state, jnp.int32(steps_per_call), jnp.int32(need),
                          weights, config=stop_config, **kw)
    stats.decode_calls += 1
    host = jax.device_get({f: getattr(state, f) for f in _HOST})
    if config.stop_strings:
      keep, hit = stop_string_cuts(host["tokens_BxT"], before, host["lengths_B"],
                                   host["prompt_lens_B"], np.nonzero(owner >= 0)[0],
                                   detokenize, config.stop_strings)
      if hit.any():
        state = engine.truncate(state, jnp.asarray(keep), jnp.asarray(hit), pad_id=pad_id)
        host = jax.device_get({f: getattr(state, f) for f in _HOST})
    free = np.nonzero(host["done_B"] & (owner >= 0))[0]
    for slot in free:
      for f in _FIELDS:
        results[f][owner[slot]] = host[f][slot]
      results["stopped"][owner[slot]] = host["stopped_B"][slot]
      owner[slot] = -1
    if len(pool) and free.size:
      state = pool.place(state, free, owner)
      stats.refills += 1
    elif shrink and not len(pool) and 0 < (owner >= 0).sum() <= width // 2:
      state, owner = _shrink(state, owner)
      stats.shrinks += 1
  mask = results["mask_BxT"]
  rollout = Rollout(tokens_BxT=results["tokens_BxT"], logp_BxT=results["logp_BxT"],
                    trunc_logz_BxT=results["trunc_logz_BxT"], mask_BxT=mask,
                    loss_mask_BxT=results["loss_mask_BxT"], prompt_lens_B=lens,
                    response_lens_B=mask.sum(axis=1), finished_B=results["stopped"])
  return rollout, stats
