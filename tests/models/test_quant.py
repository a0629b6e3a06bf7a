"""Int8 frozen base for QLoRA: the quantizer's bound, the int8 matmul, the model on it."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_post import models
from rl_post.models import lora as lora_lib
from rl_post.models import quant
from rl_post.parallel import sharding
from rl_post.training import state as state_lib

LORA = lora_lib.LoraConfig(rank=4, alpha=8.0, base_quant="int8")


def test_int8_matmul_is_within_the_quantizers_bound():
  rng = np.random.default_rng(0)
  w_KxN = jnp.asarray(rng.standard_normal((96, 40)) * rng.uniform(0.01, 2, (1, 40)), jnp.float32)
  w_KxN = w_KxN.at[:, 7].set(0.0)  # an all-zero channel stays exact
  x_MxK = jnp.asarray(rng.standard_normal((16, 96)), jnp.float32)
  q_KxN, scale_N = quant.quantize_KxN(w_KxN)
  assert q_KxN.dtype == jnp.int8 and int(jnp.abs(q_KxN).max()) == quant.QMAX
  # per entry: |W - q s| <= s / 2 (plus f32 rounding of W / s)
  assert np.all(np.abs(w_KxN - q_KxN * scale_N[None])
                <= np.asarray(scale_N)[None] / 2 * (1 + 1e-5) + 1e-9)
  exact = x_MxK @ w_KxN
  adapters = lora_lib.Adapters(weights={}, scales={"mlp": {"up": scale_N}})
  quantized = adapters.dense("mlp", "up", x_MxK, q_KxN.astype(jnp.float32))
  error, bound = np.abs(quantized - exact), quant.error_bound_MxN(x_MxK, scale_N)
  assert np.all(error <= bound * (1 + 1e-4) + 1e-5)
  assert error.max() > 1e-4 and np.all(error[:, 7] == 0)  # a real, not a vacuous, check


def test_model_on_the_int8_base_equals_the_dequantized_model(tiny_model_config,
                                                             make_random_params):
  config = tiny_model_config
  params = make_random_params(config)
  frozen = jax.jit(quant.quantize_base)(params)
  assert frozen["params"]["blocks"]["attn"]["q_proj"].dtype == jnp.int8
  assert frozen["scales"]["attn"]["q_proj"].shape == (2, 4, 8)  # [L, H, D]
  assert frozen["scales"]["mlp"]["down"].shape == (2, 32)  # [L, E]
  dequantized = jax.jit(quant.dequantize_base)(frozen)
  for name in ("q_proj", "o_proj"):  # within s / 2 of the float weights
    err = np.abs(dequantized["blocks"]["attn"][name] - params["blocks"]["attn"][name]).max()
    assert 0 < err <= float(frozen["scales"]["attn"][name].max()) / 2 * (1 + 1e-5)
  adapters = jax.jit(lora_lib.init_adapters, static_argnums=(0, 1))(config, LORA,
                                                                    jax.random.key(1))
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, config.vocab_size, (2, 9)),
                       jnp.int32)
  apply = jax.jit(models.apply, static_argnums=0)

  @jax.jit
  def on_int8(frozen, adapters):
    base, stacked = lora_lib.model_inputs(adapters, frozen, LORA, config.num_layers)
    return models.apply(config, base, tokens, lora=stacked)

  # (x @ q) s against x @ (q s): float rounding only
  np.testing.assert_allclose(on_int8(frozen, adapters), apply(config, dequantized, tokens),
                             atol=1e-4)


def test_state_keeps_the_base_int8(tiny_model_config, make_random_params):
  config, params = tiny_model_config, make_random_params(tiny_model_config)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1, 1),
                           ("data", "fsdp", "tensor", "context"))
  state = state_lib.create_train_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                       jax.random.key(0), params=params, lora=LORA)
  assert quant.is_quantized(state.frozen)
  int8 = [x for x in jax.tree.leaves(state.frozen) if x.dtype == jnp.int8]
  assert len(int8) == 7 and sum(x.size for x in int8) > 0.8 * sum(
      x.size for x in jax.tree.leaves(params))
  abstract = state_lib.abstract_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                      LORA)
  assert jax.tree.structure(abstract) == jax.tree.structure(state)
  merged = state_lib.model_params(state, LORA)  # B = 0: the dequantized base
  jax.tree.map(np.testing.assert_array_equal, merged, quant.dequantize_base(state.frozen))


@pytest.mark.parametrize("section,message", [
    (dict(rank=4, base_quant="int16"), "base_quant must be one of"),
    (dict(rank=0, base_quant="int8"), "base_quant needs rank > 0"),
])
def test_bad_base_quant_is_refused(section, message):
  with pytest.raises(ValueError, match=message):
    lora_lib.LoraConfig(**section)


@pytest.mark.parametrize("base_quant", ["", "int8"])
def test_merged_policy_shares_the_bases_embedding(tiny_model_config, make_random_params,
                                                  base_quant):
  # the sampler's params: merged blocks, and the base's own embedding (no second copy)
  config, params = tiny_model_config, make_random_params(tiny_model_config)
  lora = lora_lib.LoraConfig(rank=2, base_quant=base_quant)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1, 1),
                           ("data", "fsdp", "tensor", "context"))
  state = state_lib.create_train_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                       jax.random.key(0), params=params, lora=lora)
  state = state.replace(params=jax.tree.map(lambda x: x + 0.1, state.params))  # B != 0
  merged = state_lib.model_params(state, lora)
  base = state.frozen["params"] if base_quant else state.frozen
  assert merged["embed"]["embedding"] is base["embed"]["embedding"]
  expected = lora_lib.merge_scaled(quant.base_params(state.frozen), state.params, lora.scale)
  assert jax.tree.structure(merged) == jax.tree.structure(expected)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), merged, expected)
