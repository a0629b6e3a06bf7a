"""Chunked log-probs and entropy equal the full-logits computation, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models
from rl_post.models.layers import swiglu_MxE
from rl_post.models.logprobs import (chunked_token_logprobs, output_matrix_ExV, sequence_logprobs,
                                     token_logprobs_from_logits)


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


@pytest.mark.parametrize("prompt,chunk", [(8, 4), (7, 4), (8, 3)])
def test_masked_chunks_skip_prompt_logits_and_keep_response_values_and_gradients(prompt, chunk):
  """With the loss mask, prompt-only chunks are skipped: response entries and the
  gradient of any masked loss are unchanged, skipped entries are 0."""
  config = models.ModelConfig(vocab_size=53, num_layers=1, embed_dim=16, num_heads=2,
                              num_kv_heads=1, head_dim=8, mlp_dim=32)
  params = models.init_params(config, jax.random.key(0))
  h = jax.random.normal(jax.random.key(1), (3, 16, 16))
  w = output_matrix_ExV(config, params)
  tokens = jax.random.randint(jax.random.key(2), (3, 16), 0, 53)
  mask = np.zeros((3, 16), np.int32)
  mask[:, prompt:] = 1
  mask[1, prompt + 2:] = 0  # a short response and an all-zero row
  mask[2] = 0
  weights = jax.random.normal(jax.random.key(3), (3, 16)) * mask

  def loss(h, w, m):
    logp, ent = chunked_token_logprobs(h, w, tokens, 0.7, chunk, m)
    return (logp * weights).sum() + (ent * mask).sum(), (logp, ent)

  grad = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
  (_, (logp_a, ent_a)), grads_a = grad(h, w, None)
  (_, (logp_b, ent_b)), grads_b = grad(h, w, jnp.asarray(mask))
  live = mask.any(axis=0)
  np.testing.assert_allclose(logp_b[:, live], logp_a[:, live], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(ent_b[:, live], ent_a[:, live], rtol=1e-6, atol=1e-6)
  for a, b in zip(grads_a, grads_b):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  # chunks are aligned to the end: target t (1..15) sits in chunk (t - 1 + pad) // chunk
  pad = -(-15 // chunk) * chunk - 15
  chunk_of = lambda t: (t - 1 + pad) // chunk
  skipped = [t for t in range(1, 16) if chunk_of(t) < chunk_of(prompt)]
  assert skipped == list(range(1, prompt - (prompt - 1 + pad) % chunk))
  assert float(jnp.abs(logp_b[:, skipped]).max(initial=0.0)) == 0.0
  assert float(jnp.abs(ent_b[:, skipped]).max(initial=0.0)) == 0.0
  assert float(jnp.abs(logp_a[:, 1:prompt]).min()) > 0.0  # the full path computes them


@pytest.mark.parametrize("masked", [False, True])
def test_logprob_chunks_kept_for_backward_match_recomputed_ones(masked):
  """remat=False keeps each chunk's logits for the backward instead of recomputing
  them: the same values and gradients, and one head matmul fewer per chunk."""
  h = jax.random.normal(jax.random.key(1), (3, 16, 16))
  w = jax.random.normal(jax.random.key(2), (16, 53)) * 0.3
  tokens = jax.random.randint(jax.random.key(3), (3, 16), 0, 53)
  mask = np.zeros((3, 16), np.int32)
  mask[:, 6:] = 1
  weights = jax.random.normal(jax.random.key(4), (3, 16)) * mask

  def grad_fn(remat):
    def loss(h, w):
      logp, ent = chunked_token_logprobs(h, w, tokens, 0.7, 4, mask if masked else None,
                                         remat=remat)
      return (logp * weights).sum() + (ent * mask).sum(), (logp, ent)
    return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)

  (_, (logp_a, ent_a)), grads_a = jax.jit(grad_fn(True))(h, w)
  (_, (logp_b, ent_b)), grads_b = jax.jit(grad_fn(False))(h, w)
  np.testing.assert_allclose(logp_b, logp_a, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(ent_b, ent_a, rtol=1e-6, atol=1e-6)
  for a, b in zip(grads_a, grads_b):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)

  def head_matmuls(remat):  # dots whose operand is w: [16, 53] or its transpose
    text = jax.jit(grad_fn(remat)).lower(h, w).as_text()
    return sum("dot_general" in line and "53" in line for line in text.splitlines())
  # forward, dh and dw; recomputing adds the forward again
  assert head_matmuls(True) == head_matmuls(False) + 1


def test_swiglu_backward_matches_autodiff():
  x = jax.random.normal(jax.random.key(0), (12, 8))
  gate, up = (jax.random.normal(jax.random.key(i), (8, 16)) / 3 for i in (1, 2))
  down = jax.random.normal(jax.random.key(3), (16, 8)) / 4
  cot = jax.random.normal(jax.random.key(4), (12, 8))

  def plain(x, g, u, d):
    return (jax.nn.silu(x @ g) * (x @ u)) @ d

  _, vjp_a = jax.vjp(plain, x, gate, up, down)
  out_b, vjp_b = jax.vjp(swiglu_MxE, x, gate, up, down)
  np.testing.assert_allclose(out_b, plain(x, gate, up, down), rtol=1e-6, atol=1e-6)
  for a, b in zip(vjp_a(cot), vjp_b(cot)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
