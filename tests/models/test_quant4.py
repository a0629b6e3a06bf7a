"""4-bit frozen base for QLoRA: packing, the quantizer's bound, the model and state on it."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.ad_checkpoint import print_saved_residuals

from rl_post import models
from rl_post.models import lora as lora_lib
from rl_post.models import quant, quant4
from rl_post.parallel import sharding
from rl_post.training import state as state_lib

BLOCK = 8  # divides the tiny config's last input dims (E = 32, D = 8, F = 64)


def _lora(fmt):
  return lora_lib.LoraConfig(rank=4, alpha=8.0, base_quant=fmt, base_quant_block_size=BLOCK)


@pytest.mark.parametrize("block_size", [2, 8, 32])
def test_pack_unpack_round_trip_is_exact(block_size):
  codes_KxN = jnp.asarray(np.random.default_rng(0).integers(0, 16, (64, 5)), jnp.uint8)
  packed = quant4.pack_KxN(codes_KxN, block_size)
  assert packed.dtype == jnp.uint8 and packed.shape == (32, 5)  # two codes per byte
  np.testing.assert_array_equal(quant4.unpack_KxN(packed, block_size), codes_KxN)
  half = block_size // 2  # Q4_0's order: byte j = element j (low) | element j + B/2 (high)
  np.testing.assert_array_equal(packed[:half], codes_KxN[:half] | (codes_KxN[half:2 * half] << 4))


@pytest.mark.parametrize("fmt", quant4.FORMATS)
def test_4bit_matmul_is_within_the_quantizers_bound(fmt):
  rng = np.random.default_rng(0)
  k, n, block = 96, 40, 32
  w_KxN = jnp.asarray(rng.standard_normal((k, n)) * rng.uniform(0.01, 2, (1, n)), jnp.float32)
  w_KxN = w_KxN.at[block:2 * block, 7].set(0.0)  # an all-zero block stays exact
  x_MxK = jnp.asarray(rng.standard_normal((16, k)), jnp.float32)
  packed, scale_GxN, offset_GxN = quant4.quantize_KxN(w_KxN, fmt, block)
  assert packed.shape == (k // 2, n) and scale_GxN.shape == (k // block, n)
  assert (offset_GxN is not None) == (fmt in quant4.AFFINE)
  levels = quant4.codebook(fmt)
  w_hat = quant4.dequantize_KxN(packed, scale_GxN, levels, offset_GxN)
  # per entry: |W - (level * s + o)| <= HALF_GAP * s (int4: s / 2 with s = max|W_block| / 7;
  # q4_1: s / 2 with s = (max - min) / 15)
  entry_bound = quant4.HALF_GAP[fmt] * np.repeat(np.asarray(scale_GxN), block, axis=0)
  assert np.all(np.abs(w_KxN - w_hat) <= entry_bound * (1 + 1e-5) + 1e-9)
  assert np.all(w_hat[block:2 * block, 7] == 0)
  exact = x_MxK @ w_KxN
  adapters = lora_lib.Adapters(weights={}, scales={"mlp": {"up": scale_GxN}}, codebook=levels,
                               offsets=None if offset_GxN is None else {"mlp": {"up": offset_GxN}})
  quantized = adapters.dense("mlp", "up", x_MxK, packed)
  error, bound = np.abs(quantized - exact), quant4.error_bound_MxN(x_MxK, scale_GxN, fmt)
  assert np.all(error <= bound * (1 + 1e-4) + 1e-5)
  assert error.max() > 1e-3  # a real, not a vacuous, check
  np.testing.assert_allclose(quantized, x_MxK @ w_hat, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", quant4.FORMATS)
def test_lora_on_the_4bit_base_starts_at_the_base(fmt, tiny_model_config, make_random_params):
  config, lora = tiny_model_config, _lora(fmt)
  params = make_random_params(config)
  frozen = jax.jit(quant.quantize_base, static_argnums=(1, 2))(params, fmt, BLOCK)
  q_proj, o_proj = (frozen["params"]["blocks"]["attn"][t] for t in ("q_proj", "o_proj"))
  assert q_proj.dtype == jnp.uint8 and q_proj.shape == (2, 16, 4, 8)  # [L, E / 2, H, D]
  assert o_proj.shape == (2, 4, 4, 32)  # [L, H, D / 2, E]
  assert frozen["scales"]["attn"]["o_proj"].shape == (2, 4, 1, 32)  # [L, H, D / B, E]
  assert frozen["scales"]["mlp"]["down"].shape == (2, 8, 32)  # [L, F / B, E]
  dequantized = jax.jit(quant.dequantize_base)(frozen)
  err = np.abs(dequantized["blocks"]["mlp"]["down"] - params["blocks"]["mlp"]["down"]).max()
  assert 0 < err <= quant4.HALF_GAP[fmt] * float(frozen["scales"]["mlp"]["down"].max()) * (
      1 + 1e-5)
  adapters = jax.jit(lora_lib.init_adapters, static_argnums=(0, 1))(config, lora,
                                                                    jax.random.key(1))
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, config.vocab_size, (2, 9)),
                       jnp.int32)

  @jax.jit
  def on_4bit(frozen, adapters):
    base, stacked = lora_lib.model_inputs(adapters, frozen, lora, config.num_layers)
    return models.apply(config, base, tokens, lora=stacked)

  with_adapters = on_4bit(frozen, adapters)
  adapters_off = on_4bit(frozen, jax.tree.map(jnp.zeros_like, adapters))
  np.testing.assert_array_equal(with_adapters, adapters_off)  # B = 0 adds exact zeros
  np.testing.assert_allclose(with_adapters, jax.jit(models.apply, static_argnums=0)(
      config, dequantized, tokens), atol=1e-4)

  def loss(adapters):  # the adapters get gradients through the 4-bit layers
    return on_4bit(frozen, adapters).astype(jnp.float32).std()
  grads = jax.jit(jax.grad(loss))(adapters)
  assert float(jnp.abs(grads["attn"]["q_proj"]["B_RxN"]).max()) > 0


def test_state_keeps_the_base_4bit_at_half_the_int8_bytes(tiny_model_config,
                                                          make_random_params):
  config, params = tiny_model_config, make_random_params(tiny_model_config)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1, 1),
                           ("data", "fsdp", "tensor", "context"))
  states = {fmt: state_lib.create_train_state(
      config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES, jax.random.key(0),
      params=params, lora=lora_lib.LoraConfig(rank=4, base_quant=fmt,
                                              base_quant_block_size=BLOCK))
            for fmt in ("int8", "nf4")}
  state = states["nf4"]
  assert quant.is_quantized(state.frozen)
  blocks = lambda s: jax.tree.leaves(s.frozen["params"]["blocks"])
  packed = [x for x in blocks(state) if x.dtype == jnp.uint8]
  int8 = [x for x in blocks(states["int8"]) if x.dtype == jnp.int8]
  assert len(packed) == len(int8) == 7
  assert sum(x.nbytes for x in packed) * 2 == sum(x.nbytes for x in int8)
  lora = lora_lib.LoraConfig(rank=4, base_quant="nf4", base_quant_block_size=BLOCK)
  abstract = state_lib.abstract_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                      lora)
  assert jax.tree.structure(abstract) == jax.tree.structure(state)
  assert all(a.shape == x.shape and a.dtype == x.dtype
             for a, x in zip(jax.tree.leaves(abstract), jax.tree.leaves(state)))
  merged = state_lib.model_params(state, lora)  # B = 0: the dequantized base
  jax.tree.map(np.testing.assert_array_equal, merged, quant.dequantize_base(state.frozen))


@pytest.mark.parametrize("section,message", [
    (dict(rank=4, base_quant="int3"),
     r"base_quant must be one of \('', 'int8', 'int4', 'nf4', 'q4_1'\), got 'int3'"),
    (dict(rank=4, base_quant="nf4", base_quant_block_size=3),
     "base_quant_block_size must be an even int >= 2"),
    (dict(rank=0, base_quant="nf4"), "base_quant needs rank > 0"),
])
def test_bad_4bit_config_is_refused(section, message):
  with pytest.raises(ValueError, match=message):
    lora_lib.LoraConfig(**section)


def test_block_size_must_divide_the_last_input_dim(tiny_model_config, make_random_params):
  params = make_random_params(tiny_model_config)
  with pytest.raises(ValueError, match=r"lora.base_quant_block_size=16 does not divide the "
                     r"last input dim of attn.o_proj \(8\)"):
    quant.quantize_base(params, "int4", 16)


def test_backward_keeps_the_packed_codes_not_a_float_weight(capsys):
  k, n = 64, 48
  w_KxN = jnp.asarray(np.random.default_rng(0).standard_normal((k, n)), jnp.float32)
  packed, scale_GxN, _ = quant4.quantize_KxN(w_KxN, "nf4", 32)
  adapters = lora_lib.Adapters(
      weights={"mlp": {"up": {"A_KxR": jnp.ones((k, 2)), "B_RxN": jnp.ones((2, n))}}},
      scales={"mlp": {"up": scale_GxN}}, codebook=quant4.codebook("nf4"))
  loss = lambda weights, x: adapters.replace(weights=weights).dense("mlp", "up", x,
                                                                     packed).sum()
  print_saved_residuals(loss, adapters.weights, jnp.ones((3, k)))
  saved = capsys.readouterr().out
  assert f"u8[{k // 2},{n}]" in saved and f"f32[{k},{n}]" not in saved
