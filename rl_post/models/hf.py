"""Hugging Face checkpoints: `load` and `save` for Llama and Qwen2 models.

A checkpoint directory holds `config.json` and either `model.safetensors` or
sharded `model-*.safetensors` plus `model.safetensors.index.json`.

  config, params = hf.load("/ckpt/Qwen2.5-0.5B", mesh=mesh)
  logits = models.apply(config, params, tokens_BxT)
  hf.save("/tmp/export", config, params)

`load` never holds the whole model on one host: every param is built with
`jax.make_array_from_callback`, and each device's callback reads only its
slice from memory-mapped files.
"""

import functools
import json
import os
from typing import Any, Mapping

import jax
import numpy as np

from rl_post.models import hf_mapping, safetensors_io
from rl_post.models.config import ModelConfig, RopeScaling, read_config_file
from rl_post.models.transformer import abstract_params, param_logical_axes
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
_DTYPE_NAMES = ("float32", "bfloat16", "float16")
CONFIG_FILE = "config.json"


# ----------------------------------------------------------------------------- config


def config_from_hf(hf: Mapping[str, Any], *, dtype: str | None = None) -> ModelConfig:
  """A ModelConfig from a HF `config.json` dict (Llama or Qwen2).

  Raises:
    ValueError: naming the unsupported architecture or field.
  """
  archs = hf.get("architectures") or []
  model_type = hf.get("model_type")
  arch = next((a for a in archs if a in ARCHITECTURES), None)
  if arch is None and model_type not in ARCHITECTURES.values():
    raise ValueError(f"unsupported architecture {archs or model_type!r} "
                     f"(model_type {model_type!r}); supported: {sorted(ARCHITECTURES)}")
  family = ARCHITECTURES.get(arch, model_type)

  def need(key):
    if key not in hf:
      raise ValueError(f"config.json is missing the field {key!r}")
    return hf[key]

  act = hf.get("hidden_act", "silu")
  if act != "silu":
    raise ValueError(f"unsupported hidden_act {act!r}; only 'silu' (SwiGLU) is supported")
  for field in ("mlp_bias",) + (("attention_bias",) if family == "llama" else ()):
    if hf.get(field):
      raise ValueError(f"unsupported config field {field}=True")
  if family == "qwen2" and hf.get("use_sliding_window"):
    raise ValueError("unsupported config field use_sliding_window=True")
  embed_dim, num_heads = int(need("hidden_size")), int(need("num_attention_heads"))
  # transformers >= 5 keeps theta and scaling in `rope_parameters`; older
  # configs use top-level `rope_theta` and `rope_scaling`.
  rope = dict(hf.get("rope_parameters") or {})
  theta = rope.get("rope_theta", hf.get("rope_theta", 10_000.0))
  scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type") not in (None, "default")
                                       else None)
  if dtype is None:
    dtype = hf.get("torch_dtype") or hf.get("dtype") or "float32"
  if dtype not in _DTYPE_NAMES:
    raise ValueError(f"unsupported dtype {dtype!r}; use one of {_DTYPE_NAMES}")
  return ModelConfig(
      vocab_size=int(need("vocab_size")), num_layers=int(need("num_hidden_layers")),
      embed_dim=embed_dim, num_heads=num_heads,
      num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
      head_dim=int(hf.get("head_dim") or embed_dim // num_heads),
      mlp_dim=int(need("intermediate_size")), rope_theta=float(theta),
      rope_scaling=_rope_scaling_from_hf(scaling),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
      qkv_bias=family == "qwen2" or bool(hf.get("attention_bias", False)),
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)), dtype=dtype, param_dtype=dtype)


def _rope_scaling_from_hf(scaling) -> RopeScaling | None:
  if not scaling:
    return None
  kind = scaling.get("rope_type", scaling.get("type"))
  if kind in (None, "default"):
    return None
  if kind != "llama3":
    raise ValueError(f"unsupported rope_scaling type {kind!r}; supported: 'llama3'")
  return RopeScaling(factor=float(scaling["factor"]),
                     low_freq_factor=float(scaling["low_freq_factor"]),
                     high_freq_factor=float(scaling["high_freq_factor"]),
                     original_max_position=int(scaling["original_max_position_embeddings"]))


def config_to_hf(config: ModelConfig, *, max_position_embeddings: int = 4096,
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """A `config.json` dict transformers accepts (Qwen2 when qkv_bias, else Llama)."""
  family = "qwen2" if config.qkv_bias else "llama"
  if family == "qwen2" and config.head_dim * config.num_heads != config.embed_dim:
    raise ValueError(f"Qwen2 needs head_dim * num_heads == embed_dim, got head_dim "
                     f"{config.head_dim} * {config.num_heads} != {config.embed_dim}")
  scaling = None
  if config.rope_scaling is not None:
    s = config.rope_scaling
    scaling = {"rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
               "high_freq_factor": s.high_freq_factor,
               "original_max_position_embeddings": s.original_max_position}
    max_position_embeddings = max(max_position_embeddings,
                                  int(s.original_max_position * s.factor))
  out = {
      "architectures": ["Qwen2ForCausalLM" if family == "qwen2" else "LlamaForCausalLM"],
      "model_type": family, "vocab_size": config.vocab_size,
      "hidden_size": config.embed_dim, "intermediate_size": config.mlp_dim,
      "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads, "head_dim": config.head_dim,
      "hidden_act": "silu", "max_position_embeddings": max_position_embeddings,
      "rms_norm_eps": config.norm_eps, "rope_theta": config.rope_theta,
      "rope_scaling": scaling, "tie_word_embeddings": config.tie_embeddings,
      "torch_dtype": config.param_dtype,
  }
  if family == "llama":
    out.update(attention_bias=False, mlp_bias=False)
  else:
    out.update(use_sliding_window=False)
  out.update(extra or {})
  return out


def read_config(hf_dir: str, *, dtype: str | None = None) -> ModelConfig:
  path = os.path.join(hf_dir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no {CONFIG_FILE} in {hf_dir!r}")
  return config_from_hf(read_config_file(path), dtype=dtype)


# ----------------------------------------------------------------------------- load


def check_tensors(config: ModelConfig, source) -> None:
  """Raises ValueError naming the first missing tensor or wrong shape."""
  names = hf_mapping.required_names(config)
  missing = [n for n, _ in names if n not in source]
  if missing:
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise ValueError(f"checkpoint is missing tensor {missing[0]!r}{more}")
  for name, shape in names:
    if tuple(source.shape(name)) != tuple(shape):
      raise ValueError(f"tensor {name!r} has shape {tuple(source.shape(name))}, "
                       f"expected {tuple(shape)} from the config")


def default_mesh() -> jax.sharding.Mesh:
  return mesh_lib.make_mesh({"data": -1}, devices=jax.devices()[:1])


def place_params(config: ModelConfig, source, *, mesh=None, rules=None, skip=frozenset()):
  """Builds the params tree from `source` straight into its shardings.

  Args:
    config: the model config (gives shapes and dtypes).
    source: HF-named tensors: `name in source`, `source.shape(name)`,
      `source.get(name)` (numpy array-like, HF layout; may be a memmap).
    mesh: target mesh (default: the first device).
    rules: logical-axis rules (default `sharding.DEFAULT_RULES`).
    skip: param paths (e.g. ("blocks", "attn", "q_proj")) left out of the
      tree and never read (a quantizing loader reads those itself).
  """
  check_tensors(config, source)
  mesh = mesh or default_mesh()
  rules = rules or sharding.DEFAULT_RULES
  shardings = sharding.tree_shardings(param_logical_axes(config), abstract_params(config),
                                      mesh, rules)
  dtype = np.dtype(jax.numpy.dtype(config.param_dtype))
  params = {}
  for spec in hf_mapping.param_specs(config):
    if spec.path in skip:
      continue
    shape = spec.full_shape(config.num_layers)

    def callback(index, spec=spec):
      if not spec.per_layer:
        return np.asarray(spec.to_ours(source.get(spec.name()))[index], dtype=dtype)
      layers = range(*index[0].indices(config.num_layers))
      return np.stack([np.asarray(spec.to_ours(source.get(spec.name(i)))[index[1:]],
                                  dtype=dtype) for i in layers])

    array = jax.make_array_from_callback(shape, hf_mapping.get_path(shardings, spec.path),
                                         callback)
    hf_mapping.set_path(params, spec.path, array)
  return params


def load(hf_dir: str, *, mesh=None, rules=None, dtype: str | None = None):
  """Loads a HF Llama/Qwen2 safetensors checkpoint.

  Args:
    hf_dir: directory with config.json and safetensors file(s).
    mesh: place params on this mesh (default: one device).
    rules: logical-axis sharding rules (default `DEFAULT_RULES`).
    dtype: "float32" | "bfloat16" | "float16" for params and compute
      (default: the checkpoint's `torch_dtype`).
  Returns:
    (ModelConfig, params) ready for `rl_post.models.apply`.
  """
  if not os.path.isdir(hf_dir):
    raise FileNotFoundError(f"checkpoint directory {hf_dir!r} does not exist")
  config = read_config(hf_dir, dtype=dtype)
  return config, place_params(config, safetensors_io.SafetensorsDir(hf_dir), mesh=mesh,
                              rules=rules)


# ----------------------------------------------------------------------------- save


def hf_tensors(config: ModelConfig, params, *, dtype: str | None = None):
  """Params as HF tensors: a list of (name, nbytes, make) in HF name order.

  `make()` fetches one layer of one param to the host and returns it in HF
  layout, so a writer holds one shard at a time, never the whole model.
  """
  out_dtype = np.dtype(jax.numpy.dtype(dtype or config.param_dtype))
  entries = []
  for spec in hf_mapping.param_specs(config):
    try:
      value = hf_mapping.get_path(params, spec.path)
    except KeyError:
      raise ValueError(f"params are missing {'.'.join(spec.path)!r}") from None
    if tuple(value.shape) != spec.full_shape(config.num_layers):
      raise ValueError(f"param {'.'.join(spec.path)!r} has shape {tuple(value.shape)}, "
                       f"expected {spec.full_shape(config.num_layers)}")
    nbytes = int(np.prod(spec.hf_shape)) * out_dtype.itemsize

    def make(value=value, spec=spec, layer=None):
      host = np.asarray(jax.device_get(value if layer is None else value[layer]))
      return np.ascontiguousarray(spec.to_hf(host).astype(out_dtype))

    layers = range(config.num_layers) if spec.per_layer else [None]
    entries += [(spec.name(i), nbytes, functools.partial(make, layer=i)) for i in layers]
  # HF orders layers numerically; keeps each layer's tensors in one shard
  return sorted(entries, key=lambda entry: _natural_key(entry[0]))


def _natural_key(name: str):
  return [int(p) if p.isdigit() else p for p in name.split(".")]


def save(hf_dir: str, config: ModelConfig, params, *, max_shard_bytes: int = 2 << 30,
         dtype: str | None = None, extra_config: Mapping[str, Any] | None = None) -> str:
  """Writes `params` as a HF checkpoint transformers can load; returns hf_dir.

  Args:
    hf_dir: output directory (created).
    config: the model config.
    params: params tree, possibly sharded: fetched one layer of one param at a
      time, so the host holds at most one shard file (single-process arrays).
    max_shard_bytes: split into several files plus an index above this size.
    dtype: storage dtype (default: config.param_dtype).
    extra_config: extra config.json fields (e.g. bos_token_id, eos_token_id).
  """
  if max_shard_bytes <= 0:
    raise ValueError(f"max_shard_bytes must be > 0, got {max_shard_bytes}")
  hf_config = config_to_hf(config, extra=extra_config)
  if dtype is not None:
    hf_config["torch_dtype"] = dtype
  os.makedirs(hf_dir, exist_ok=True)
  tensors = hf_tensors(config, params, dtype=dtype)
  for stale in os.listdir(hf_dir):
    if stale.endswith(".safetensors") or stale == safetensors_io.INDEX_FILE:
      os.remove(os.path.join(hf_dir, stale))
  safetensors_io.write_sharded(hf_dir, tensors, max_shard_bytes)
  with open(os.path.join(hf_dir, CONFIG_FILE), "w") as f:
    json.dump(hf_config, f, indent=2)
  return hf_dir
