"""HF safetensors import/export: logits parity with transformers, both ways.

Tiny random Llama and Qwen2 models are built locally (no hub access).
"""

import json
import os

import jax
import numpy as np
import pytest

from rl_post import models
from rl_post.models import hf
from rl_post.parallel.mesh import make_mesh
from rl_post.parallel.sharding import DEFAULT_RULES
from rl_post.training.state import param_shardings

import torch
import transformers

TOL = 1e-4
# one compiled program per config instead of op-by-op dispatch
_apply = jax.jit(models.apply, static_argnums=0)

CASES = {
    "llama": dict(arch="llama", tie=False, rope_scaling=None),
    "llama3_scaled_tied": dict(arch="llama", tie=True, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)),
    "qwen2": dict(arch="qwen2", tie=True, rope_scaling=None),
}


def _hf_config(arch, tie, rope_scaling):
  common = dict(vocab_size=101, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                tie_word_embeddings=tie, max_position_embeddings=128,
                initializer_range=0.3)  # logits of O(10), not O(0.1)
  if arch == "qwen2":
    return transformers.Qwen2Config(**common, rope_theta=1_000_000.0)
  # head_dim != hidden/heads exercises the explicit head_dim path
  config = transformers.LlamaConfig(**common, head_dim=16, rope_theta=500_000.0,
                                    rope_scaling=rope_scaling)
  return config


def _random_hf_model(arch, tie, rope_scaling, seed=0):
  torch.manual_seed(seed)
  cls = transformers.Qwen2ForCausalLM if arch == "qwen2" else transformers.LlamaForCausalLM
  model = cls(_hf_config(arch, tie, rope_scaling)).eval()
  with torch.no_grad():  # norms start at 1 and biases at 0: randomise them too
    for name, p in model.named_parameters():
      if name.endswith("bias") or "norm" in name:
        p.add_(0.1 * torch.randn_like(p))
  return model


def _hf_logits(model, tokens):
  with torch.no_grad():
    return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


def _tokens(vocab, seed=1, shape=(2, 24)):
  return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


@pytest.mark.parametrize("case", sorted(CASES))
def test_load_matches_transformers(tmp_path, case):
  model = _random_hf_model(**CASES[case])
  # a small shard size forces several files plus the index
  model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="20KB")
  assert os.path.exists(tmp_path / "model.safetensors.index.json")
  config, params = hf.load(str(tmp_path))
  spec = CASES[case]
  assert config.tie_embeddings == spec["tie"]
  assert config.qkv_bias == (spec["arch"] == "qwen2")
  assert (config.rope_scaling is not None) == (spec["rope_scaling"] is not None)
  tokens = _tokens(config.vocab_size)
  ours = np.asarray(_apply(config, params, tokens))
  diff = np.abs(ours - _hf_logits(model, tokens)).max()
  print(f"{case}: load, max |ours - transformers| = {diff:.2e} (max |logit| "
        f"{np.abs(ours).max():.1f})")
  assert diff <= TOL, diff


@pytest.mark.parametrize("case", ["llama3_scaled_tied", "qwen2"])
def test_save_loads_in_transformers(tmp_path, case, make_random_params):
  model = _random_hf_model(**CASES[case])
  model.save_pretrained(tmp_path / "src", safe_serialization=True)
  config, _ = hf.load(str(tmp_path / "src"))
  params = make_random_params(config, seed=1, scale=0.5)
  hf.save(str(tmp_path / "out"), config, params, max_shard_bytes=30_000)
  assert os.path.exists(tmp_path / "out" / "model.safetensors.index.json")
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "out", dtype=torch.float32).eval()
  expected_cls = "Qwen2ForCausalLM" if case == "qwen2" else "LlamaForCausalLM"
  assert type(reloaded).__name__ == expected_cls
  tokens = _tokens(config.vocab_size, seed=2)
  ours = np.asarray(_apply(config, params, tokens))
  diff = np.abs(ours - _hf_logits(reloaded, tokens)).max()
  print(f"{case}: save, max |ours - transformers| = {diff:.2e} (max |logit| "
        f"{np.abs(ours).max():.1f})")
  assert diff <= TOL, diff
  # and the round trip through our own loader is exact
  config2, params2 = hf.load(str(tmp_path / "out"))
  assert config2 == config
  jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_load_onto_mesh_shards_params(tmp_path):
  """Every param lands in its NamedSharding (one device; test_hf_sharded uses eight)."""
  model = _random_hf_model(**CASES["qwen2"])
  model.save_pretrained(tmp_path, safe_serialization=True)
  mesh = make_mesh({"data": -1})
  config, params = hf.load(str(tmp_path), mesh=mesh)
  want = param_shardings(config, mesh, DEFAULT_RULES)
  assert all(jax.tree.leaves(jax.tree.map(
      lambda p, s: p.sharding.is_equivalent_to(s, p.ndim), params, want)))


def _write_bad_checkpoint(tmp_path, mutate_config=None, drop=None, reshape=None):
  model = _random_hf_model(**CASES["llama"])
  model.save_pretrained(tmp_path, safe_serialization=True)
  if mutate_config:
    path = tmp_path / "config.json"
    values = json.loads(path.read_text())
    mutate_config(values)
    path.write_text(json.dumps(values))
  if drop or reshape:
    from rl_post.models import safetensors_io
    source = safetensors_io.SafetensorsDir(str(tmp_path))
    tensors = {n: np.array(source.get(n)) for n in source.names() if n != drop}
    if reshape:
      tensors[reshape] = tensors[reshape][:-1]
    del source
    os.remove(tmp_path / "model.safetensors")
    safetensors_io.write_file(str(tmp_path / "model.safetensors"), tensors)


def test_missing_tensor_is_named(tmp_path):
  _write_bad_checkpoint(tmp_path, drop="model.layers.1.mlp.up_proj.weight")
  with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
    hf.load(str(tmp_path))


def test_shape_mismatch_is_named(tmp_path):
  _write_bad_checkpoint(tmp_path, reshape="model.layers.0.self_attn.k_proj.weight")
  with pytest.raises(ValueError, match=r"tensor 'model\.layers\.0\.self_attn\.k_proj\.weight' "
                     r"has shape \(31, 32\), expected \(32, 32\)"):
    hf.load(str(tmp_path))


def test_unsupported_architecture_is_named(tmp_path):
  def to_gpt2(values):
    values.update(architectures=["GPT2LMHeadModel"], model_type="gpt2")
  _write_bad_checkpoint(tmp_path, mutate_config=to_gpt2)
  with pytest.raises(ValueError, match="unsupported architecture.*GPT2LMHeadModel"):
    hf.load(str(tmp_path))


def test_unsupported_rope_scaling_is_named(tmp_path):
  def to_yarn(values):
    values["rope_scaling"] = dict(rope_type="yarn", factor=4.0)
    values.pop("rope_parameters", None)
  _write_bad_checkpoint(tmp_path, mutate_config=to_yarn)
  with pytest.raises(ValueError, match="unsupported rope_scaling type 'yarn'"):
    hf.load(str(tmp_path))


def test_missing_directory_and_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    hf.load(str(tmp_path / "nope"))
  with pytest.raises(FileNotFoundError, match="no config.json"):
    hf.load(str(tmp_path))


def test_bfloat16_checkpoint_loads_bit_exact(tmp_path):
  model = _random_hf_model(**CASES["qwen2"]).to(torch.bfloat16)
  model.save_pretrained(tmp_path, safe_serialization=True)
  config, params = hf.load(str(tmp_path))
  assert (config.dtype, config.param_dtype) == ("bfloat16", "bfloat16")
  q = np.asarray(params["blocks"]["attn"]["q_proj"][1]).astype(np.float32)
  ref = model.model.layers[1].self_attn.q_proj.weight.detach().float().numpy()
  np.testing.assert_array_equal(q, ref.reshape(config.num_heads, config.head_dim, -1)
                                .transpose(2, 0, 1))
  _, params32 = hf.load(str(tmp_path), dtype="float32")
  assert params32["embed"]["embedding"].dtype == np.float32
