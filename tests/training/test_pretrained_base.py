"""A QLoRA run's start state from `pretrained.path`: a GGUF file's own Q4 blocks
become the frozen base as they are, any other checkpoint is quantized as it is
read, and no start path dequantizes the block projections to float first."""

import jax
import numpy as np
import optax
import pytest

from configs import grpo_arithmetic, sft_arithmetic
from rl_post import models
from rl_post.errors import ConfigError
from rl_post.models import gguf, gguf_q4, pretrained, quant
from rl_post.models import lora as lora_lib
from rl_post.rl import start_state
from rl_post.rl.components import RLComponents
from rl_post.sft import trainer as sft_trainer
from rl_post.training import run
from rl_post.training import state as state_lib

import tiny_gguf
from tiny_gguf import Q


@pytest.fixture
def no_float_projections(monkeypatch):
  """Makes dequantizing a block projection of a GGUF file (what a float load
  does to every one of them) raise; returns the monkeypatch (`undo()` ends it)."""
  names = set(gguf_q4.projection_names(models.ModelConfig(
      vocab_size=8, num_layers=tiny_gguf.L, embed_dim=8, num_heads=1, num_kv_heads=1,
      head_dim=8, mlp_dim=8)))
  dequantize = gguf.GGUFSource._dequantize

  def refuse(self, name):
    if name in names:
      raise AssertionError(f"{name} was dequantized to float")
    return dequantize(self, name)

  monkeypatch.setattr(gguf.GGUFSource, "_dequantize", refuse)
  return monkeypatch


def _rl_config(tokenizer_path, path, **lora):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.pretrained = dict(path=path, dtype="float32")
  c.model = {}  # the architecture is the file's
  c.rl.lora.update(dict(rank=4, alpha=8.0, **lora))
  return c


def _gguf(tmp_path, tokenizer, qtypes):
  return tiny_gguf.write(tmp_path / "tiny.gguf", qtypes, vocab_size=tokenizer.vocab_size)


def _rl_start(config, workdir):
  """The RL trainer's start state (`start_state.fresh_state`) and its components."""
  c = RLComponents(config, str(workdir))
  return start_state.fresh_state(c), c


def test_rl_start_keeps_the_ggufs_q4_blocks_and_starts_at_the_float_model(
    tmp_path, tokenizer_path, tokenizer, no_float_projections):
  path = _gguf(tmp_path, tokenizer, (Q.Q4_1, Q.Q4_0))
  config = _rl_config(tokenizer_path, path, base_quant="q4_1", base_quant_block_size=32)
  config.rl.grpo.kl_coef = 0.1  # a run with a KL reference
  state, c = _rl_start(config, tmp_path / "w")
  model_config, expected = gguf_q4.load_q4_base(path)
  assert jax.tree.structure(state.frozen) == jax.tree.structure(expected)
  jax.tree.map(np.testing.assert_array_equal, state.frozen, expected)  # bit for bit

  no_float_projections.undo()
  _, float_params = gguf.load(path)  # gguf's own dequantization of the same blocks
  tokens = np.random.default_rng(0).integers(0, tokenizer.vocab_size, (2, 9)).astype(np.int32)
  float_logits = models.apply(model_config, float_params, tokens)
  base, stacked = lora_lib.model_inputs(state.params, state.frozen, c.rl.lora,
                                        model_config.num_layers)
  # B = 0: the start policy is the base, which reads the file's blocks exactly (float rounding)
  np.testing.assert_allclose(models.apply(model_config, base, tokens, lora=stacked),
                             float_logits, atol=1e-4)
  ref_copy = start_state.reference_copy(c, state)
  assert ref_copy is None  # the KL reference is the base itself (adapters off), no copy
  reference = c.reference_params(state, ref_copy)
  np.testing.assert_allclose(models.apply(model_config, reference, tokens), float_logits,
                             atol=1e-4)


def test_rl_start_reads_an_int4_base_from_q4_0_blocks(tmp_path, tokenizer_path, tokenizer,
                                                      no_float_projections):
  path = _gguf(tmp_path, tokenizer, (Q.Q4_0,))
  state, _ = _rl_start(_rl_config(tokenizer_path, path, base_quant="int4",
                                  base_quant_block_size=32), tmp_path / "w")
  _, expected = gguf_q4.load_q4_base(path, base_quant="int4")
  assert "offsets" not in state.frozen
  jax.tree.map(np.testing.assert_array_equal, state.frozen, expected)


@pytest.mark.parametrize("qtypes, lora, field, holds", [
    ((Q.Q4_1,), dict(base_quant="q4_1"), "rl.lora.base_quant_block_size",
     "Q4_1 blocks of 32 values: set base_quant_block_size=32"),
    ((Q.Q4_1, Q.Q4_0), dict(base_quant="int4", base_quant_block_size=32), "rl.lora.base_quant",
     "Q4_0 and Q4_1 blocks, and a Q4_1 block's offset has no place in an int4 base: set "
     "base_quant='q4_1'")], ids=["q4_1_block_64", "int4_over_q4_1"])
def test_a_base_quant_the_ggufs_blocks_are_not_is_a_config_error(
    tmp_path, tokenizer_path, tokenizer, qtypes, lora, field, holds):
  path = _gguf(tmp_path, tokenizer, qtypes)
  with pytest.raises(ConfigError) as raised:
    _rl_start(_rl_config(tokenizer_path, path, **lora), tmp_path / "w")
  assert raised.value.field == field
  assert f"pretrained.path={path!r}: the GGUF file's block projections are {holds}" in str(
      raised.value)


def _float_start(ctx, lora):
  """What the start state was made of before: the float load, then `quantize_base`."""
  params = run.pretrained_params(ctx)
  return state_lib.create_train_state(ctx.model_config, optax.sgd(0.1), ctx.mesh, ctx.rules,
                                      ctx.key("init"), params=params, lora=lora).frozen


@pytest.mark.parametrize("qtypes, base_quant", [((Q.Q8_0,), "q4_1"), ((Q.F32,), "q4_1"),
                                                ((Q.Q4_1,), "nf4"), ((Q.Q4_0, Q.Q8_0), "int8")])
def test_other_projections_are_quantized_as_they_are_read(
    tmp_path, tokenizer_path, tokenizer, caplog, qtypes, base_quant):
  path = _gguf(tmp_path, tokenizer, qtypes)
  config = _rl_config(tokenizer_path, path, base_quant=base_quant, base_quant_block_size=32)
  ctx = run.setup_run(config, str(tmp_path / "w"))
  lora = lora_lib.LoraConfig(rank=4, alpha=8.0, base_quant=base_quant, base_quant_block_size=32)
  with caplog.at_level("INFO", logger="absl"):
    frozen = run.pretrained_params(ctx, lora, "rl.lora")
  held = "/".join(sorted(q.name for q in set(qtypes)))
  assert f"its block projections are {held}" in caplog.text and base_quant in caplog.text
  assert quant.is_quantized(frozen)
  state = state_lib.create_train_state(ctx.model_config, optax.sgd(0.1), ctx.mesh, ctx.rules,
                                       ctx.key("init"), params=frozen, lora=lora, donate=True)
  expected = _float_start(ctx, lora)
  assert jax.tree.structure(state.frozen) == jax.tree.structure(expected)
  jax.tree.map(np.testing.assert_array_equal, state.frozen, expected)  # bit for bit


def test_no_float_model_is_loaded_on_the_quantizing_path(tmp_path, tokenizer_path, tokenizer,
                                                        monkeypatch):
  path = _gguf(tmp_path, tokenizer, (Q.Q8_0,))
  ctx = run.setup_run(_rl_config(tokenizer_path, path, base_quant="nf4",
                                 base_quant_block_size=32), str(tmp_path / "w"))
  floats = []  # the name of every tensor read as float, in order
  get = gguf.GGUFSource.get
  monkeypatch.setattr(gguf.GGUFSource, "get",
                      lambda self, name: floats.append(name) or get(self, name))
  monkeypatch.setattr(pretrained, "load", lambda *a, **k: pytest.fail("float load"))
  lora = lora_lib.LoraConfig(rank=4, base_quant="nf4", base_quant_block_size=32)
  frozen = run.pretrained_params(ctx, lora, "rl.lora")
  assert frozen["params"]["blocks"]["mlp"]["up"].dtype == np.uint8
  projections = [n for n in floats if n in set(gguf_q4.projection_names(ctx.model_config))]
  assert len(projections) == len(set(projections)) == 7 * tiny_gguf.L  # each read once


def test_sft_start_keeps_the_ggufs_q4_blocks(tmp_path, tokenizer_path, tokenizer,
                                             no_float_projections):
  path = _gguf(tmp_path, tokenizer, (Q.Q4_1,))
  c = sft_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.pretrained = dict(path=path, dtype="float32")
  c.model = {}
  c.sft.update(num_steps=1, batch_size=4, checkpoint_every=1,
               lora=dict(rank=4, alpha=8.0, base_quant="q4_1", base_quant_block_size=32))
  c.optimizer.update(warmup_steps=0, total_steps=1)
  result = sft_trainer.train(c, str(tmp_path / "w"))
  _, expected = gguf_q4.load_q4_base(path)
  jax.tree.map(np.testing.assert_array_equal, result["state"].frozen, expected)

  c.sft.lora.base_quant_block_size = 64
  with pytest.raises(ConfigError, match=r"sft.lora.base_quant_block_size=64: pretrained.path="):
    sft_trainer.train(c, str(tmp_path / "w64"))
