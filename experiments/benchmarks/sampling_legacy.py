"""Baseline: the static sampler as it was on main before the rollout engine.

Kept verbatim (stacked KV cache scanned over layers, categorical sampling)
so experiments/benchmarks/sampling.py can measure the new engine against
it in the same run. Not part of the library.

Jitted autoregressive sampler with a KV cache.

Layout: prompts are right-padded, row b has `prompt_lens[b]` real tokens.
The prompt is prefilled into the cache in one pass; then each decode step
writes one token per row at slot prompt_lens[b] + i. The output sequence of
row b is its prompt followed directly by its response, right-padded: the
same layout the trainer uses, so trainer log-probs are a plain causal
forward over `tokens_BxT`.
"""

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp

from rl_post import models
from rl_post.config_sections import check
from rl_post.models.logprobs import scaled_log_softmax


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How responses are drawn.

  Attributes:
    max_new_tokens: response length cap.
    temperature: softmax temperature (the behaviour policy is pi^(1/temp)).
    greedy: take the argmax instead of sampling (log-probs at temperature 1).
  """
  max_new_tokens: int = 64
  temperature: float = 1.0
  greedy: bool = False

  def __post_init__(self):
    check(self.max_new_tokens > 0, "max_new_tokens", "must be > 0", self.max_new_tokens)
    check(self.temperature > 0, "temperature", "must be > 0", self.temperature)


@flax.struct.dataclass
class Rollout:
  tokens_BxT: jax.Array     # prompt + response + padding
  logp_BxT: jax.Array       # behaviour log-prob of each response token (0 elsewhere)
  mask_BxT: jax.Array       # 1 on response tokens (EOS included), 0 elsewhere
  prompt_lens_B: jax.Array
  response_lens_B: jax.Array
  finished_B: jax.Array     # True if the response ended with EOS


def _choose(logits_BxV, rng, config: SamplingConfig):
  if config.greedy:
    token_B = jnp.argmax(logits_BxV, axis=-1)
    logp_BxV = scaled_log_softmax(logits_BxV, 1.0)
  else:
    logp_BxV = scaled_log_softmax(logits_BxV, config.temperature)
    token_B = jax.random.categorical(rng, logp_BxV, axis=-1)
  token_B = token_B.astype(jnp.int32)
  return token_B, jnp.take_along_axis(logp_BxV, token_B[:, None], axis=-1)[:, 0]


@functools.partial(jax.jit, static_argnames=("model_config", "config", "eos_id", "pad_id"))
def generate(params, prompts_BxP, prompt_lens_B, rng, *, model_config, config: SamplingConfig,
             eos_id: int, pad_id: int) -> Rollout:
  """Samples one response per row; stops rows at EOS, all at max_new_tokens.

  Args:
    params: model params (may be sharded; the batch should be too).
    prompts_BxP: right-padded int32 prompts.
    prompt_lens_B: number of real tokens per row (>= 1).
    rng: PRNG key.
  Returns:
    A Rollout with T = P + max_new_tokens.
  """
  batch, prompt_len = prompts_BxP.shape
  total_len = prompt_len + config.max_new_tokens
  rows_B = jnp.arange(batch)
  tokens_BxT = jnp.full((batch, total_len), pad_id, jnp.int32).at[:, :prompt_len].set(
      jnp.where(jnp.arange(prompt_len)[None, :] < prompt_lens_B[:, None], prompts_BxP, pad_id))
  cache = models.init_cache(model_config, batch, total_len)
  positions_BxP = jnp.broadcast_to(jnp.arange(prompt_len, dtype=jnp.int32), prompts_BxP.shape)
  logits_BxPxV, cache = models.apply_with_cache(model_config, params, prompts_BxP,
                                                positions_BxP, cache)
  last_logits_BxV = logits_BxPxV[rows_B, prompt_lens_B - 1]

  init = dict(i=jnp.int32(0), tokens=tokens_BxT, logp=jnp.zeros((batch, total_len), jnp.float32),
              mask=jnp.zeros((batch, total_len), jnp.int32), done=jnp.zeros(batch, bool),
              logits=last_logits_BxV, cache=cache, rng=rng)

  def cond(s):
    return (s["i"] < config.max_new_tokens) & ~jnp.all(s["done"])

  def body(s):
    rng, step_rng = jax.random.split(s["rng"])
    token_B, logp_B = _choose(s["logits"], step_rng, config)
    active_B = ~s["done"]
    pos_B = prompt_lens_B + s["i"]
    token_B = jnp.where(active_B, token_B, pad_id)
    tokens = s["tokens"].at[rows_B, pos_B].set(token_B)
    logp = s["logp"].at[rows_B, pos_B].set(jnp.where(active_B, logp_B, 0.0))
    mask = s["mask"].at[rows_B, pos_B].set(active_B.astype(jnp.int32))
    done = s["done"] | (token_B == eos_id)
    logits, cache = models.apply_with_cache(model_config, params, token_B[:, None],
                                            pos_B[:, None], s["cache"])
    return dict(i=s["i"] + 1, tokens=tokens, logp=logp, mask=mask, done=done,
                logits=logits[:, 0], cache=cache, rng=rng)

  final = jax.lax.while_loop(cond, body, init)
  return Rollout(tokens_BxT=final["tokens"], logp_BxT=final["logp"], mask_BxT=final["mask"],
                 prompt_lens_B=prompt_lens_B, response_lens_B=final["mask"].sum(axis=1),
                 finished_B=final["done"])
