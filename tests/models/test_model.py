"""Model: shapes, causality, KV-cache consistency, config validation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_post import models


@pytest.mark.parametrize("tie,bias", [(True, False), (False, True)])
def test_shapes_and_param_count(tiny_model_config, tie, bias):
  config = dataclasses.replace(tiny_model_config, tie_embeddings=tie, qkv_bias=bias)
  params = models.init_params(config, jax.random.key(0))
  tokens = jnp.zeros((3, 7), jnp.int32)
  logits = models.apply(config, params, tokens)
  assert logits.shape == (3, 7, config.vocab_size) and logits.dtype == jnp.float32
  assert sum(x.size for x in jax.tree.leaves(params)) == config.num_params
  axes = models.param_logical_axes(config)
  shapes = jax.tree.map(lambda x: x.ndim, params)
  assert jax.tree.structure(shapes) == jax.tree.structure(
      jax.tree.map(len, axes, is_leaf=lambda x: isinstance(x, tuple)))
  assert ("lm_head" in params) == (not tie)
  assert ("q_bias" in params["blocks"]["attn"]) == bias


def test_causality(tiny_model_config):
  """Changing token t never changes logits at positions < t."""
  params = models.init_params(tiny_model_config, jax.random.key(1))
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, tiny_model_config.vocab_size, (2, 12)).astype(np.int32)
  base = models.apply(tiny_model_config, params, tokens)
  for t in (0, 5, 11):
    changed = tokens.copy()
    changed[:, t] = (changed[:, t] + 1) % tiny_model_config.vocab_size
    out = models.apply(tiny_model_config, params, changed)
    np.testing.assert_array_equal(out[:, :t], base[:, :t])
    assert not np.allclose(out[:, t:], base[:, t:])


def test_prefill_and_decode_match_full_forward(tiny_model_config):
  config = dataclasses.replace(tiny_model_config, qkv_bias=True)
  params = models.init_params(config, jax.random.key(2))
  tokens = jax.random.randint(jax.random.key(3), (2, 9), 0, config.vocab_size)
  full = models.apply(config, params, tokens)
  cache = models.init_cache(config, 2, 12)
  pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
  logits, cache = models.apply_with_cache(config, params, tokens[:, :5], pos, cache)
  np.testing.assert_allclose(logits, full[:, :5], atol=1e-5)
  for t in range(5, 9):
    step_pos = jnp.full((2, 1), t, jnp.int32)
    logits, cache = models.apply_with_cache(config, params, tokens[:, t:t + 1], step_pos, cache)
    np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5)


def test_rope_scaling_changes_only_low_frequencies():
  from rl_post.models import rope
  plain = rope.inverse_frequencies(64, 500_000.0)
  scaled = rope.inverse_frequencies(64, 500_000.0, models.RopeScaling())
  assert scaled[0] == plain[0]                    # highest frequency untouched
  np.testing.assert_allclose(scaled[-1], plain[-1] / 8.0, rtol=1e-6)  # lowest divided by factor


@pytest.mark.parametrize("field,value,message", [
    ("num_kv_heads", 3, "model.num_heads (4) must be a multiple of model.num_kv_heads (3)"),
    ("embed_dim", 0, "model.embed_dim must be a positive int"),
    ("dtype", "float8", "model.dtype must be one of"),
    ("attention_impl", "cuda", "model.attention_impl must be one of"),
])
def test_bad_model_config_names_field(tiny_model_config, field, value, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
    dataclasses.replace(tiny_model_config, **{field: value})


def test_unknown_model_field_is_named():
  with pytest.raises(ValueError, match=r"unknown model config field\(s\) \['num_layer'\]"):
    models.ModelConfig.from_dict(dict(vocab_size=8, num_layer=2))
