"""The SFT loss computed a chunk of positions at a time (`sft.logprob_chunk`) is the
whole-logits loss: same loss, accuracy and gradients, padded and packed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import sft_arithmetic
from rl_post import models
from rl_post.data import batching
from rl_post.sft.trainer import SFTConfig, make_sft_loss

PROMPTS = ["What is 1+2?", "What is 47+38?", "What is 5+5?", "What is 12+345?"]
RESPONSES = ["<answer>3</answer>", "<think>7+8+0=5,1 4+3+1=8,0</think>\n<answer>85</answer>",
             "<answer>10</answer>", "<answer>357</answer>"]


@pytest.fixture(scope="module")
def model(tokenizer):
  c = sft_arithmetic.get_config("tiny")
  config = models.ModelConfig(**{**c.model.to_dict(), "vocab_size": 256 * (
      (tokenizer.vocab_size + 255) // 256)})
  return config, models.init_params(config, jax.random.key(3))


def _batches(tokenizer):
  max_len = 48
  tokens, mask, _ = batching.encode_demonstrations(tokenizer, PROMPTS, RESPONSES, max_len)
  packed, dropped = batching.pack_demonstrations(tokenizer, PROMPTS, RESPONSES, 2 * max_len)
  assert dropped == 0 and packed["segments"].max() >= 2
  return {"padded": {"tokens": tokens, "mask": mask}, "packed": packed}


@pytest.mark.parametrize("chunk,remat", [(5, "full"), (7, "none"), (200, "dots")])
def test_chunked_sft_loss_equals_the_whole_logits_loss(model, tokenizer, chunk, remat):
  config, params = model
  whole = jax.jit(jax.value_and_grad(make_sft_loss(config), has_aux=True))
  chunked = jax.jit(jax.value_and_grad(
      make_sft_loss(config, sft=SFTConfig(logprob_chunk=chunk, remat=remat)), has_aux=True))
  for name, batch in _batches(tokenizer).items():
    batch = jax.tree.map(jnp.asarray, batch)
    (loss_a, aux_a), grads_a = whole(params, batch, None)
    (loss_b, aux_b), grads_b = chunked(params, batch, None)
    assert np.isfinite(float(loss_a)), name
    np.testing.assert_allclose(loss_b, loss_a, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(aux_b["token_accuracy"], aux_a["token_accuracy"], atol=1e-6,
                               err_msg=name)
    assert float(aux_b["response_tokens"]) == float(aux_a["response_tokens"]) > 0
    for a, b in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)):
      np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=name)


def test_chunked_loss_ignores_logits_outside_the_mask(model, tokenizer):
  """Changing prompt tokens' targets moves neither loss: only response tokens count."""
  config, params = model
  batch = _batches(tokenizer)["padded"]
  loss = jax.jit(make_sft_loss(config, sft=SFTConfig(logprob_chunk=4, remat="full")))
  no_response = dict(batch, mask=np.zeros_like(batch["mask"]))
  value, aux = loss(params, no_response, None)
  assert float(value) == 0.0 and float(aux["response_tokens"]) == 0.0


@pytest.mark.parametrize("kwargs,field", [(dict(logprob_chunk=-1), "logprob_chunk"),
                                          (dict(logprob_chunk=8, remat="most"), "remat"),
                                          (dict(remat="full"), "remat")])
def test_bad_chunk_settings_name_the_field(kwargs, field):
  with pytest.raises(ValueError, match=field):
    SFTConfig(**kwargs)
