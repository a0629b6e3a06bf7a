"""Sampling controls and the one definition of the behaviour log-prob.

Behaviour log-prob (what a rollout records for each sampled token):
  log softmax(logits / temperature)[token]
i.e. the log-prob under the *tempered, untruncated* distribution, exactly
what the trainer recomputes (`rl_post.models.logprobs.scaled_log_softmax`), so
the first-epoch importance ratio is 1 up to float error. Greedy decoding
records the temperature-1 log-prob.

Truncation (top-k, top-p, min-p) only restricts which tokens can be drawn:
the token is drawn from the tempered distribution renormalised over the
kept set. The mass of that set, log Z = logsumexp(kept tempered log-probs)
<= 0, is recorded alongside (`trunc_logz`), so the exact sampling
log-prob is `logp - trunc_logz` for callers that want it.

Drawing uses inverse-CDF sampling with one uniform per row derived from
(row seed, absolute token position): a row's draws depend only on its seed
and its tokens, never on the batch it ran in, so static, resumed and
continuously batched decoding give the same tokens for the same seeds.
"""

import dataclasses

import jax
import jax.numpy as jnp

from rl_post.config_sections import check
from rl_post.models.logprobs import scaled_log_softmax

DEFAULT_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How responses are drawn.

  Attributes:
    max_new_tokens: response length cap (per generate/extend call).
    temperature: softmax temperature (the behaviour policy is pi^(1/temp)).
    greedy: take the argmax instead of sampling (log-probs at temperature 1).
    top_k: keep the k most likely tokens (0: off).
    top_p: keep the smallest set with tempered mass >= top_p (1.0: off).
    min_p: keep tokens with prob >= min_p * max prob (0.0: off).
    stop_token_ids: a row ends after sampling any of these (included in
      the response); the tokenizer's EOS is added by the caller.
    stop_strings: a row ends once its detokenized response contains one of
      these (matched on the host every `stop_check_interval` steps; the
      response is cut right after the token that completes the match).
    stop_check_interval: decode steps between host-side stop-string checks.
    length_buckets: prompt lengths and cache capacities are rounded up to
      one of these, so batches of varied lengths reuse compiled code.
  """
  max_new_tokens: int = 64
  temperature: float = 1.0
  greedy: bool = False
  top_k: int = 0
  top_p: float = 1.0
  min_p: float = 0.0
  stop_token_ids: frozenset = frozenset()
  stop_strings: tuple = ()
  stop_check_interval: int = 16
  length_buckets: tuple = DEFAULT_BUCKETS

  def __post_init__(self):
    check(self.max_new_tokens > 0, "max_new_tokens", "must be > 0", self.max_new_tokens)
    check(self.temperature > 0, "temperature", "must be > 0", self.temperature)
    check(self.top_k >= 0, "top_k", "must be >= 0", self.top_k)
    check(0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]", self.top_p)
    check(0.0 <= self.min_p < 1.0, "min_p", "must be in [0, 1)", self.min_p)
    check(self.stop_check_interval > 0, "stop_check_interval", "must be > 0",
          self.stop_check_interval)
    check(all(isinstance(s, str) and s for s in self.stop_strings), "stop_strings",
          "must be non-empty strings", self.stop_strings)
    check(len(self.length_buckets) > 0 and list(self.length_buckets) == sorted(
        set(self.length_buckets)) and self.length_buckets[0] > 0, "length_buckets",
          "must be strictly increasing positive ints", self.length_buckets)
    object.__setattr__(self, "stop_token_ids", frozenset(int(t) for t in self.stop_token_ids))
    object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
    object.__setattr__(self, "length_buckets", tuple(int(b) for b in self.length_buckets))

  @property
  def truncates(self) -> bool:
    return not self.greedy and (self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0)

  def device_key(self) -> "SamplingConfig":
    """The fields compiled code depends on (host-only fields normalised)."""
    return dataclasses.replace(self, max_new_tokens=1, stop_strings=(),
                               stop_check_interval=1, length_buckets=(1,))


def bucket(length: int, buckets) -> int:
  """The smallest bucket >= length (an error past the largest)."""
  for b in buckets:
    if b >= length:
      return b
  raise ValueError(f"length {length} exceeds the largest length bucket {buckets[-1]}; "
                   "add a larger bucket to SamplingConfig.length_buckets")


def keep_mask(logp_BxV, config: SamplingConfig):
  """Tokens the truncation controls keep (tempered log-probs in, bool out)."""
  keep = jnp.ones(logp_BxV.shape, bool)
  if config.top_k > 0 and config.top_k < logp_BxV.shape[-1]:
    kth_Bx1 = jax.lax.top_k(logp_BxV, config.top_k)[0][:, -1:]
    keep &= logp_BxV >= kth_Bx1
  if config.top_p < 1.0:
    masked = jnp.where(keep, logp_BxV, -jnp.inf)
    sorted_BxV = -jnp.sort(-masked, axis=-1)
    probs = jnp.exp(sorted_BxV - jax.nn.logsumexp(sorted_BxV, axis=-1, keepdims=True))
    mass_before_BxV = jnp.cumsum(probs, axis=-1) - probs
    kept_sorted = mass_before_BxV < config.top_p
    threshold_Bx1 = jnp.min(jnp.where(kept_sorted, sorted_BxV, jnp.inf), axis=-1,
                            keepdims=True)
    keep &= logp_BxV >= threshold_Bx1
  if config.min_p > 0.0:
    max_Bx1 = jnp.max(logp_BxV, axis=-1, keepdims=True)
    keep &= logp_BxV >= max_Bx1 + jnp.log(config.min_p)
  return keep


def behaviour_log_softmax(logits_BxV, config: SamplingConfig):
  """(logp_BxV, keep_BxV): the recorded log-probs and the drawable tokens.

  logp_BxV is the tempered log-softmax the trainer recomputes (temperature
  1 for greedy); keep_BxV marks the tokens truncation leaves drawable.
  """
  temperature = 1.0 if config.greedy else config.temperature
  logp_BxV = scaled_log_softmax(logits_BxV, temperature)
  if not config.truncates:
    return logp_BxV, jnp.ones(logp_BxV.shape, bool)
  return logp_BxV, keep_mask(logp_BxV, config)


def row_uniforms(seeds_B, positions_B):
  """One uniform in (0, 1] per row from (seed, absolute position)."""
  def one(seed, pos):
    return 1.0 - jax.random.uniform(jax.random.fold_in(jax.random.key(seed), pos))
  return jax.vmap(one)(seeds_B, positions_B)


def inverse_cdf(probs_BxV, u_B, block: int = 128):
  """The first token whose cumulative mass reaches u * total (u in (0, 1]).

  Two levels (block sums, then one block), so the scans are over
  ~sqrt(V) entries instead of V. Zero-mass tokens are never chosen: a
  block or token is picked only where the cumulative sum grows.
  """
  batch, vocab = probs_BxV.shape
  block = min(block, vocab)
  num_blocks = -(-vocab // block)
  padded = jnp.pad(probs_BxV, ((0, 0), (0, num_blocks * block - vocab)))
  probs_BxNxC = padded.reshape(batch, num_blocks, block)
  mass_BxN = probs_BxNxC.sum(axis=-1)
  cdf_BxN = jnp.cumsum(mass_BxN, axis=-1)
  target_B = u_B * cdf_BxN[:, -1]
  blk_B = jnp.minimum(jnp.sum(cdf_BxN < target_B[:, None], axis=-1), num_blocks - 1)
  rows_B = jnp.arange(batch)
  inner_BxC = probs_BxNxC[rows_B, blk_B]
  before_B = cdf_BxN[rows_B, blk_B] - mass_BxN[rows_B, blk_B]
  idx_B = jnp.sum(before_B[:, None] + jnp.cumsum(inner_BxC, axis=-1) < target_B[:, None], -1)
  last_nonzero_B = block - 1 - jnp.argmax((inner_BxC > 0)[:, ::-1], axis=-1)
  return (blk_B * block + jnp.minimum(idx_B, last_nonzero_B)).astype(jnp.int32)


def choose(logits_BxV, seeds_B, positions_B, config: SamplingConfig, u_B=None):
  """Draws one token per row: (token_B, logp_B, trunc_logz_B).

  Inverse CDF over the kept tempered distribution: the first token whose
  cumulative mass reaches u * total, u in (0, 1] (dropped tokens add no
  mass, so they are never chosen). u_B: the rows' `row_uniforms`, when the
  caller drew them ahead (the decode loop draws a whole call's at once).
  """
  if not config.greedy and u_B is None:
    u_B = row_uniforms(seeds_B, positions_B)
  if not config.truncates:
    return _choose_untruncated(logits_BxV, u_B, config)
  logp_BxV, keep_BxV = behaviour_log_softmax(logits_BxV, config)
  probs_BxV = jnp.where(keep_BxV, jnp.exp(logp_BxV), 0.0)
  token_B = inverse_cdf(probs_BxV, u_B)
  logz_B = jax.nn.logsumexp(jnp.where(keep_BxV, logp_BxV, -jnp.inf), axis=-1)
  logp_B = jnp.take_along_axis(logp_BxV, token_B[:, None], axis=-1)[:, 0]
  return token_B, logp_B, logz_B


def _choose_untruncated(logits_BxV, u_B, config: SamplingConfig):
  """`choose` without truncation: one exp over the vocabulary, no [B, V] log-probs.

  The draw uses exp(z - max z) unnormalised (the inverse CDF compares
  against u * total), and only the chosen token's log-prob is formed, by
  the same formula as `scaled_log_softmax`: z - max z - log sum exp(z - max z).
  Nothing is truncated, so trunc_logz is exactly 0.
  """
  temperature = 1.0 if config.greedy else config.temperature
  z_BxV = logits_BxV.astype(jnp.float32) / temperature
  max_Bx1 = jnp.max(z_BxV, axis=-1, keepdims=True)
  unnorm_BxV = jnp.exp(z_BxV - max_Bx1)
  if config.greedy:
    token_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
  else:
    token_B = inverse_cdf(unnorm_BxV, u_B)
  z_B = jnp.take_along_axis(z_BxV, token_B[:, None], axis=-1)[:, 0]
  logp_B = (z_B - max_Bx1[:, 0]) - jnp.log(jnp.sum(unnorm_BxV, axis=-1))
  return token_B, logp_B, jnp.zeros(token_B.shape, jnp.float32)
