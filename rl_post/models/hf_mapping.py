"""Tensor-name and layout mapping between rl_post params and HF checkpoints.

One table (`param_specs`) says, for every rl_post parameter, which Hugging
Face tensor holds it and how the layouts relate. HF Llama/Qwen2 store linear
weights as [out, in]; rl_post stores einsum-ready kernels ([E, H, D] for q,
[H, D, E] for o, [E, F] for gate/up). Our RoPE uses the same half-split
("rotate_half") layout as HF, so q/k need no permutation here.

The mapping is shared by the safetensors reader/writer (`hf.py`) and the
GGUF importer (`gguf.py`, which first renames llama.cpp tensors to HF names).
"""

import dataclasses
from typing import Callable

import numpy as np

from rl_post.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class ParamSpec:
  """How one rl_post param relates to HF tensor(s).

  Attributes:
    path: key path in the params dict, e.g. ("blocks", "attn", "q_proj").
    hf_name: HF tensor name; per-layer names contain "{i}".
    per_layer: the param is stacked over a leading [L] axis.
    hf_shape: shape of one HF tensor.
    shape: shape of one (per-layer) rl_post slice.
    to_ours: HF array -> our layout (a view where possible).
    to_hf: our layout -> HF array.
  """
  path: tuple[str, ...]
  hf_name: str
  per_layer: bool
  hf_shape: tuple[int, ...]
  shape: tuple[int, ...]
  to_ours: Callable[[np.ndarray], np.ndarray]
  to_hf: Callable[[np.ndarray], np.ndarray]

  def name(self, layer: int | None = None) -> str:
    return self.hf_name.format(i=layer) if self.per_layer else self.hf_name

  def full_shape(self, num_layers: int) -> tuple[int, ...]:
    return ((num_layers,) + self.shape) if self.per_layer else self.shape


def _identity(x):
  return x


def _transpose(x):
  return x.T


def param_specs(config: ModelConfig) -> list[ParamSpec]:
  """The mapping for `config`, in a stable order (embedding first)."""
  e, h, k, d, f, v = (config.embed_dim, config.num_heads, config.num_kv_heads,
                      config.head_dim, config.mlp_dim, config.vocab_size)

  def proj(heads):  # [heads*D, E] <-> [E, heads, D]
    return (lambda x: x.reshape(heads, d, e).transpose(2, 0, 1),
            lambda x: x.transpose(1, 2, 0).reshape(heads * d, e))

  def bias(heads):
    return (lambda x: x.reshape(heads, d), lambda x: x.reshape(heads * d))

  layer = "model.layers.{i}."
  specs = [ParamSpec(("embed", "embedding"), "model.embed_tokens.weight", False,
                     (v, e), (v, e), _identity, _identity)]
  attn = [("q_proj", h), ("k_proj", k), ("v_proj", k)]
  for name, heads in attn:
    specs.append(ParamSpec(("blocks", "attn", name), layer + f"self_attn.{name}.weight", True,
                           (heads * d, e), (e, heads, d), *proj(heads)))
  specs.append(ParamSpec(("blocks", "attn", "o_proj"), layer + "self_attn.o_proj.weight", True,
                         (e, h * d), (h, d, e),
                         lambda x: x.reshape(e, h, d).transpose(1, 2, 0),
                         lambda x: x.transpose(2, 0, 1).reshape(e, h * d)))
  if config.qkv_bias:
    for name, heads in attn:
      specs.append(ParamSpec(("blocks", "attn", name[0] + "_bias"),
                             layer + f"self_attn.{name}.bias", True,
                             (heads * d,), (heads, d), *bias(heads)))
  specs += [
      ParamSpec(("blocks", "attn_norm", "scale"), layer + "input_layernorm.weight", True,
                (e,), (e,), _identity, _identity),
      ParamSpec(("blocks", "mlp_norm", "scale"), layer + "post_attention_layernorm.weight",
                True, (e,), (e,), _identity, _identity),
      ParamSpec(("blocks", "mlp", "gate"), layer + "mlp.gate_proj.weight", True,
                (f, e), (e, f), _transpose, _transpose),
      ParamSpec(("blocks", "mlp", "up"), layer + "mlp.up_proj.weight", True,
                (f, e), (e, f), _transpose, _transpose),
      ParamSpec(("blocks", "mlp", "down"), layer + "mlp.down_proj.weight", True,
                (e, f), (f, e), _transpose, _transpose),
      ParamSpec(("final_norm", "scale"), "model.norm.weight", False, (e,), (e,),
                _identity, _identity),
  ]
  if not config.tie_embeddings:
    specs.append(ParamSpec(("lm_head",), "lm_head.weight", False, (v, e), (e, v),
                           _transpose, _transpose))
  return specs


def required_names(config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
  """Every HF tensor name the model needs, with its expected shape."""
  out = []
  for spec in param_specs(config):
    layers = range(config.num_layers) if spec.per_layer else [None]
    out += [(spec.name(i), spec.hf_shape) for i in layers]
  return out


def get_path(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def set_path(tree, path, value):
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value
