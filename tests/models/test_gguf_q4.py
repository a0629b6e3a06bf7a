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

V, E, F, H, K, D, L = 40, 64, 96, 2, 1, 32, 2  # every matmul input a multiple of 32
Q = gguf_lib.GGMLQuantizationType
_LAYER = {"attn_q.weight": (H * D, E), "attn_k.weight": (K * D, E), "attn_v.weight": (K * D, E),
          "attn_output.weight": (E, H * D), "ffn_gate.weight": (F, E), "ffn_up.weight": (F, E),
          "ffn_down.weight": (E, F)}


def _write(path, qtypes):
  """A tiny llama GGUF whose projections are quantized by gguf itself, `qtypes`
  cycling over them (norms and the embedding float32)."""
  rng = np.random.default_rng(0)
  writer = gguf_lib.GGUFWriter(str(path), "llama")
  for add, value in [(writer.add_block_count, L), (writer.add_context_length, 64),
                     (writer.add_embedding_length, E), (writer.add_feed_forward_length, F),
                     (writer.add_head_count, H), (writer.add_head_count_kv, K),
                     (writer.add_key_length, D), (writer.add_layer_norm_rms_eps, 1e-5),
                     (writer.add_rope_freq_base, 10_000.0), (writer.add_vocab_size, V)]:
    add(value)
  writer.add_tensor("token_embd.weight", (rng.standard_normal((V, E)) * 0.3).astype(np.float32))
  writer.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
  count = 0
  for i in range(L):
    for norm in ("attn_norm.weight", "ffn_norm.weight"):
      writer.add_tensor(f"blk.{i}.{norm}", (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
    for name, shape in _LAYER.items():
      qtype = qtypes[count % len(qtypes)]
      count += 1
      value = (rng.standard_normal(shape) * 0.3 + 0.05).astype(np.float32)
      writer.add_tensor(f"blk.{i}.{name}", gguf_lib.quants.quantize(value, qtype), raw_dtype=qtype)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return str(path)


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
