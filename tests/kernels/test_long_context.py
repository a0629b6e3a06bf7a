"""Long context: the tiny model's 32,768-token training step fits in O(T).

Compiles (does not run) forward+backward of the tiny model at 32k tokens with
the XLA attention and checks XLA's own memory analysis. The run itself, with
time and measured peak RSS, is in experiments/benchmarks/attention.py
(--model_tokens=32768); tests never time things.
"""

import jax
import jax.numpy as jnp
import pytest

models = pytest.importorskip("rl_post.models")

TOKENS = 32768


def _tiny(impl):
  return models.ModelConfig(vocab_size=384, num_layers=4, embed_dim=128,
                            num_heads=4, num_kv_heads=2, head_dim=32,
                            mlp_dim=384, attention_impl=impl)


def _loss(config, params, tokens_BxT):
  logits = models.apply(config, params, tokens_BxT)
  logp = jax.nn.log_softmax(logits[:, :-1])
  return -jnp.take_along_axis(logp, tokens_BxT[:, 1:, None], -1).mean()


def _compiled_bytes(config, tokens):
  params = models.abstract_params(config)
  step = jax.jit(jax.value_and_grad(lambda p, t: _loss(config, p, t)))
  mem = step.lower(
      params, jax.ShapeDtypeStruct((1, tokens), jnp.int32)).compile().memory_analysis()
  return mem.temp_size_in_bytes + mem.output_size_in_bytes


def test_tiny_model_32k_train_step_memory_is_linear():
  config = _tiny("xla")
  at_32k = _compiled_bytes(config, TOKENS)
  print(f"tiny model fwd+bwd at {TOKENS} tokens: {at_32k / 2**20:.0f} MiB "
        "compiled temp+output")
  # ~70 KiB per token of model activations (2.2 GiB); one [H, T, T] f32
  # score tensor alone would be 16 GiB, the dense-attention step ~200 GiB.
  assert at_32k < 3 * 2**30
  assert at_32k < config.num_heads * TOKENS * TOKENS * 4 / 5
