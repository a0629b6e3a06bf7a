"""GGUF Q4_0 / Q4_1 blocks as a 4-bit frozen base, against gguf's own dequantization."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_post import models
from rl_post.models import gguf, gguf_q4, quant, quant4
from rl_post.models import lora as lora_lib
from rl_post.parallel import sharding
from rl_post.training import state as state_lib

import gguf as gguf_lib
import tiny_gguf
from tiny_gguf import D, E, H, K, L, Q, V

_write = tiny_gguf.write


@pytest.mark.parametrize("qtypes", [(Q.Q4_0,), (Q.Q4_1, Q.Q4_0)], ids=["q4_0", "q4_1+q4_0"])
def test_q4_base_equals_ggufs_dequantization(tmp_path, qtypes):
  path = _write(tmp_path / "tiny.gguf", qtypes)
  config, frozen = gguf_q4.load_q4_base(path)
  _, reference = gguf.load(path)  # gguf.quants.dequantize, un-permuted, our layout
  affine = Q.Q4_1 in qtypes
  assert set(frozen) == ({"params", "scales", "codebook", "offsets"} if affine
                         else {"params", "scales", "codebook"})
  q_proj = frozen["params"]["blocks"]["attn"]["q_proj"]
  assert q_proj.dtype == jnp.uint8 and q_proj.shape == (L, E // 2, H, D)
  assert frozen["scales"]["attn"]["o_proj"].shape == (L, H, D // 32, E)
  # the file's code bytes, transposed: v_proj of layer 0 (not permuted)
  tensor = next(t for t in gguf.open_reader(path).tensors if t.name == "blk.0.attn_v.weight")
  np.testing.assert_array_equal(
      np.asarray(frozen["params"]["blocks"]["attn"]["v_proj"][0]).reshape(E // 2, K * D).T,
      gguf_q4.q4_blocks(tensor)["codes"])
  dequantized = jax.jit(quant.dequantize_base)(frozen)
  for path_, ours, ref in zip(jax.tree_util.tree_flatten_with_path(dequantized)[0],
                              jax.tree.leaves(dequantized), jax.tree.leaves(reference)):
    if affine:  # c d + m: float32 rounding of the sum (XLA may fuse it)
      np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-7 * np.abs(ref).max() + 1e-9,
                                 err_msg=str(path_[0]))
    else:  # (c - 8) d is exact in float32 both ways
      np.testing.assert_array_equal(ours, ref, err_msg=str(path_[0]))

  lora = lora_lib.LoraConfig(rank=4, base_quant="int4", base_quant_block_size=32)
  adapters = lora_lib.init_adapters(config, lora, jax.random.key(1))
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, V, (2, 7)), jnp.int32)
  base, stacked = lora_lib.model_inputs(adapters, frozen, lora, config.num_layers)
  np.testing.assert_allclose(models.apply(config, base, tokens, lora=stacked),
                             models.apply(config, reference, tokens), atol=1e-4)


def test_gguf_bases_are_int4_and_q4_1_train_state_bases(tmp_path):
  config, frozen = gguf_q4.load_q4_base(_write(tmp_path / "tiny.gguf", (Q.Q4_0,)))
  lora = lora_lib.LoraConfig(rank=4, base_quant="int4", base_quant_block_size=32)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1, 1),
                           ("data", "fsdp", "tensor", "context"))
  state = state_lib.create_train_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                       jax.random.key(0), params=frozen, lora=lora)
  jax.tree.map(np.testing.assert_array_equal, state.frozen, frozen)  # kept, not requantized
  abstract = state_lib.abstract_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                      lora)
  assert jax.tree.structure(abstract) == jax.tree.structure(state)
  _, affine = gguf_q4.load_q4_base(_write(tmp_path / "q4_1.gguf", (Q.Q4_1,)))
  q4_1 = dataclasses.replace(lora, base_quant="q4_1")
  state = state_lib.create_train_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                       jax.random.key(0), params=affine, lora=q4_1)
  jax.tree.map(np.testing.assert_array_equal, state.frozen, affine)
  assert jax.tree.structure(state.frozen) == jax.tree.structure(state_lib.abstract_state(
      config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES, q4_1).frozen)
  for base, lora_ in ((frozen, dataclasses.replace(lora, base_quant_block_size=16)),
                      (affine, lora)):
    with pytest.raises(ValueError, match=r"the quantized base params are not what "
                       r"lora.base_quant='int4' with base_quant_block_size=(16|32) makes"):
      state_lib.create_train_state(config, optax.adam(1e-2), mesh, sharding.DEFAULT_RULES,
                                   jax.random.key(0), params=base, lora=lora_)


def test_non_q4_projection_is_named(tmp_path):
  path = _write(tmp_path / "tiny.gguf", (Q.Q4_0, Q.Q8_0))
  with pytest.raises(ValueError, match=r"is Q8_0; a 4-bit base reads Q4_0 or Q4_1 blocks"):
    gguf_q4.load_q4_base(path)


def test_smollm2_q4_1_blocks_equal_ggufs_dequantization():
  """The packaged SmolLM2 file (Q4_1 projections): layer 0's blocks, read as
  ours, equal gguf's own dequantization of the same tensors."""
  reader = gguf.open_reader(gguf.smollm2_gguf_path())
  for tensor in reader.tensors:
    if not tensor.name.startswith("blk.0.") or tensor.tensor_type.name != "Q4_1":
      continue
    blocks = gguf_q4.q4_blocks(tensor)
    ours_NxK = quant4.dequantize_KxN(
        jnp.asarray(blocks["codes"].T), jnp.asarray(blocks["d"].T.astype(np.float32)),
        jnp.arange(16, dtype=jnp.float32), jnp.asarray(blocks["m"].T.astype(np.float32))).T
    ref = gguf_lib.quants.dequantize(tensor.data, tensor.tensor_type)
    np.testing.assert_allclose(ours_NxK, ref, rtol=0, atol=2e-7 * np.abs(ref).max(),
                               err_msg=tensor.name)


def test_load_q4_base_makes_the_named_format(tmp_path):
  path = _write(tmp_path / "q4_0.gguf", (Q.Q4_0,))
  _, int4 = gguf_q4.load_q4_base(path)
  _, affine = gguf_q4.load_q4_base(path, base_quant="q4_1")  # Q4_0 blocks, offset -8 d
  assert "offsets" not in int4 and set(affine["offsets"]) == {"attn", "mlp"}
  jax.tree.map(np.testing.assert_array_equal, affine["params"], int4["params"])
  jax.tree.map(lambda o, s: np.testing.assert_array_equal(o, -8 * s), affine["offsets"],
               int4["scales"])
  np.testing.assert_allclose(jax.jit(quant.dequantize_base)(affine)["blocks"]["mlp"]["up"],
                             jax.jit(quant.dequantize_base)(int4)["blocks"]["mlp"]["up"],
                             rtol=0, atol=1e-6)
  with pytest.raises(gguf_q4.BlockMismatch, match=r"lora.base_quant='int4': .* Q4_0 and Q4_1 "
                     r"blocks, .* set base_quant='q4_1'"):
    gguf_q4.load_q4_base(_write(tmp_path / "mixed.gguf", (Q.Q4_1, Q.Q4_0)), base_quant="int4")


@pytest.mark.parametrize("types, base_quant, block_size, keeps", [
    ({"Q4_1"}, "q4_1", 32, True), ({"Q4_0", "Q4_1"}, "q4_1", 32, True),
    ({"Q4_0"}, "q4_1", 32, True), ({"Q4_0"}, "int4", 32, True),
    ({"Q4_1"}, "nf4", 64, False), ({"Q4_1"}, "int8", 64, False),  # no GGUF block format
    ({"F32"}, "q4_1", 32, False), ({"Q4_1", "Q8_0"}, "q4_1", 32, False),  # not all 4-bit
    ({"Q8_0"}, "int4", 64, False)])
def test_keeps_blocks(types, base_quant, block_size, keeps):
  assert gguf_q4.keeps_blocks(types, base_quant, block_size) is keeps


@pytest.mark.parametrize("types, base_quant, block_size, key", [
    ({"Q4_1"}, "q4_1", 64, "base_quant_block_size"),
    ({"Q4_0"}, "int4", 16, "base_quant_block_size"),
    ({"Q4_1"}, "int4", 32, "base_quant"), ({"Q4_0", "Q4_1"}, "int4", 64, "base_quant")])
def test_keeps_blocks_names_the_setting_that_would_keep_them(types, base_quant, block_size, key):
  with pytest.raises(gguf_q4.BlockMismatch) as raised:
    gguf_q4.keeps_blocks(types, base_quant, block_size)
  assert raised.value.key == key
  assert "blocks" in raised.value.problem and "to load them as they are" in raised.value.problem
