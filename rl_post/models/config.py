"""Model hyperparameters: one frozen, validated, hashable dataclass."""

import dataclasses
import json
from typing import Any, Mapping

DTYPES = ("float32", "bfloat16", "float16")
_ATTENTION_IMPLS = ("auto", "pallas", "xla", "reference")
_CONTEXT_LAYOUTS = ("zigzag", "striped", "contiguous")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama-3 style frequency-dependent RoPE scaling."""
  factor: float = 8.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """A decoder-only transformer of the Llama / Qwen2 family.

  Attributes:
    vocab_size: V, number of token ids.
    num_layers: L, transformer blocks.
    embed_dim: E, residual stream width.
    num_heads: H, query heads.
    num_kv_heads: K, key/value heads (grouped-query attention, H % K == 0).
    head_dim: D, per-head width.
    mlp_dim: F, SwiGLU hidden width.
    rope_theta: RoPE base frequency.
    rope_scaling: optional Llama-3 RoPE scaling.
    tie_embeddings: the output projection reuses the input embedding.
    qkv_bias: q/k/v projections have biases (Qwen2).
    norm_eps: RMSNorm epsilon.
    dtype: activation/compute dtype.
    param_dtype: parameter storage dtype.
    attention_impl: see `rl_post.kernels.attention`.
    context_layout: token order for context parallelism (ring attention
      over the `context` mesh axis): "zigzag" | "striped" | "contiguous".
  """
  vocab_size: int
  num_layers: int
  embed_dim: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp_dim: int
  rope_theta: float = 10_000.0
  rope_scaling: RopeScaling | None = None
  tie_embeddings: bool = True
  qkv_bias: bool = False
  norm_eps: float = 1e-6
  dtype: str = "float32"
  param_dtype: str = "float32"
  attention_impl: str = "auto"
  context_layout: str = "zigzag"

  def __post_init__(self):
    for name in ("vocab_size", "num_layers", "embed_dim", "num_heads",
                 "num_kv_heads", "head_dim", "mlp_dim"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"model.{name} must be a positive int, got {value!r}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"model.num_heads ({self.num_heads}) must be a multiple of "
          f"model.num_kv_heads ({self.num_kv_heads})")
    if self.rope_theta <= 0:
      raise ValueError(f"model.rope_theta must be > 0, got {self.rope_theta}")
    if self.norm_eps <= 0:
      raise ValueError(f"model.norm_eps must be > 0, got {self.norm_eps}")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in DTYPES:
        raise ValueError(f"model.{name} must be one of {DTYPES}, "
                         f"got {getattr(self, name)!r}")
    if self.context_layout not in _CONTEXT_LAYOUTS:
      raise ValueError(f"model.context_layout must be one of {_CONTEXT_LAYOUTS}, "
                       f"got {self.context_layout!r}")
    if self.attention_impl not in _ATTENTION_IMPLS:
      raise ValueError(f"model.attention_impl must be one of {_ATTENTION_IMPLS}, "
                       f"got {self.attention_impl!r}")

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> "ModelConfig":
    """Builds from a ConfigDict/dict, naming unknown fields in the error."""
    values = dict(values)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown model config field(s) {unknown}; "
                       f"known: {sorted(known)}")
    scaling = values.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, RopeScaling):
      values["rope_scaling"] = RopeScaling(**dict(scaling))
    return cls(**values)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @property
  def num_params(self) -> int:
    e, f, d = self.embed_dim, self.mlp_dim, self.head_dim
    attn = e * d * (self.num_heads * 2 + self.num_kv_heads * 2)
    if self.qkv_bias:
      attn += d * (self.num_heads + 2 * self.num_kv_heads)
    block = attn + 3 * e * f + 2 * e
    head = 0 if self.tie_embeddings else self.vocab_size * e
    return self.num_layers * block + self.vocab_size * e + head + e


def read_config_file(path: str) -> dict:
  """The JSON object in a model config file (an export's model_config.json, a HF
  folder's config.json).

  Raises:
    ValueError: the file is not JSON, or holds something else than an object.
  """
  with open(path) as f:
    try:
      values = json.load(f)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
      raise ValueError(f"{path} is not valid JSON ({e})") from e
  if not isinstance(values, dict):
    raise ValueError(f"{path} is not a JSON object")
  return values
