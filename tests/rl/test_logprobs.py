"""Chunked log-probs and entropy equal the full-logits computation, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.rl.logprobs import sequence_logprobs, token_logprobs_from_logits


@pytest.mark.parametrize("chunk,remat,tie", [(1, "none", True), (4, "full", False),
                                             (64, "dots", True)])
def test_chunked_matches_full_logits(chunk, remat, tie):
  config = models.ModelConfig(vocab_size=53, num_layers=2, embed_dim=16, num_heads=2,
                              num_kv_heads=1, head_dim=8, mlp_dim=32, tie_embeddings=tie)
  params = models.init_params(config, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (3, 11), 0, 53)
  weights = jax.random.normal(jax.random.key(2), (3, 11))

  def full(p):
    logp, ent = token_logprobs_from_logits(models.apply(config, p, tokens), tokens, 0.7)
    return (logp * weights).sum() + ent.sum(), (logp, ent)

  def chunked(p):
    logp, ent = sequence_logprobs(config, p, tokens, 0.7, chunk=chunk, remat=remat)
    return (logp * weights).sum() + ent.sum(), (logp, ent)

  (_, (logp_a, ent_a)), grad_a = jax.jit(jax.value_and_grad(full, has_aux=True))(params)
  (_, (logp_b, ent_b)), grad_b = jax.jit(jax.value_and_grad(chunked, has_aux=True))(params)
  np.testing.assert_allclose(logp_b, logp_a, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ent_b, ent_a, rtol=1e-5, atol=1e-5)
  assert float(jnp.abs(logp_b[:, 0]).max()) == 0.0
  jax.tree.map(lambda a, b: np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4),
               grad_a, grad_b)
