"""Per-token log-probabilities of a sequence under the model.

The sampler and the trainer both go through `token_logprobs_from_logits`,
so the behaviour log-prob recorded at sampling time and the one recomputed
for the loss come from the same code.
"""

import jax
import jax.numpy as jnp

from rl_post import models


def scaled_log_softmax(logits_xV, temperature: float):
  return jax.nn.log_softmax(logits_xV.astype(jnp.float32) / temperature, axis=-1)


def token_logprobs_from_logits(logits_BxTxV, tokens_BxT, temperature: float = 1.0):
  """logp_BxT[:, t] = log p(tokens[t] | tokens[<t]); entry 0 is 0.

  Also returns the per-position entropy of the predictive distribution
  (aligned the same way).
  """
  logp_BxTxV = scaled_log_softmax(logits_BxTxV[:, :-1], temperature)
  next_BxT = tokens_BxT[:, 1:]
  logp = jnp.take_along_axis(logp_BxTxV, next_BxT[..., None], axis=-1)[..., 0]
  entropy = -(jnp.exp(logp_BxTxV) * logp_BxTxV).sum(-1)
  pad = jnp.zeros((tokens_BxT.shape[0], 1), jnp.float32)
  return jnp.concatenate([pad, logp], axis=1), jnp.concatenate([pad, entropy], axis=1)


def sequence_logprobs(model_config, params, tokens_BxT, temperature: float = 1.0,
                      context_mesh=None):
  """Pure: (logp_BxT, entropy_BxT) of `tokens_BxT` under `params`."""
  logits = models.apply(model_config, params, tokens_BxT, context_mesh=context_mesh)
  return token_logprobs_from_logits(logits, tokens_BxT, temperature)
