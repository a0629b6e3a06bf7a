"""LoRA adapters: a low-rank update of the frozen projections, trained alone.

For a targeted projection W (in -> out), the adapted layer computes

  y = x @ W + (alpha / r) * (dropout(x) @ A_KxR) @ B_RxN

with A small and random and B = 0 at init, so the adapted model starts
equal to the base. Adapters are a params subtree of their own,
`{"attn": {"q_proj": {"A_KxR", "B_RxN"}, ...}, "mlp": {...}}`, every leaf
stacked over the [L] layers like the blocks' params; the optimizer sees
only this subtree, and the base with adapters off is the reference model.

The forward applies the update at the matmul (`Adapters.dense`), inside
the layer scan, instead of merging W + (alpha/r) A @ B: a merge would make
a full-size weight per projection in the forward and, worse, a full-size
weight gradient dL/dW in the backward (from which dA, dB follow). At the
matmul the frozen W only carries the input gradient; the adapter path adds
two thin matmuls ([M, K] x [K, r], [M, r] x [r, N]) and keeps the [M, r]
product for the backward, so peak memory grows by O(M r) per layer, not by
a weight. `merge` (the export, and the sampler's copy of the policy) folds
the update in once.
"""

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from rl_post.config_sections import check
from rl_post.models.config import ModelConfig
from rl_post.models import quant
from rl_post.models.matmul import dot_acc32

# our projection names, the module holding each, and its HF (PEFT) name
TARGETS = {"q_proj": ("attn", "self_attn", "q_proj"), "k_proj": ("attn", "self_attn", "k_proj"),
           "v_proj": ("attn", "self_attn", "v_proj"), "o_proj": ("attn", "self_attn", "o_proj"),
           "gate": ("mlp", "mlp", "gate_proj"), "up": ("mlp", "mlp", "up_proj"),
           "down": ("mlp", "mlp", "down_proj")}
RANK_AXIS = "lora_rank"  # the logical axis of r (a rule in the sharding table)


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """The `rl.lora` / `sft.lora` section.

  Attributes:
    rank: r, the adapters' rank; 0 = off (the whole model is trained).
    alpha: the update is scaled by alpha / r.
    dropout: dropout rate on the adapter path's input (SFT only: in RL the
      update's log-probs must equal the sampler's, so `rl.lora.dropout` is 0).
    targets: projections that get adapters, from q_proj, k_proj, v_proj,
      o_proj (attention) and gate, up, down (MLP).
    base_quant: "" keeps the frozen base in its dtype; "int8" stores every
      block projection int8 with per-output-channel scales, applied to each
      matmul's output; "int4" / "nf4" / "q4_1" store it as 4-bit codes packed
      two per byte with one scale (q4_1: and one offset) per block of
      `base_quant_block_size` input values, dequantized one layer at a time
      before each matmul (QLoRA:
      `rl_post.models.quant`, `rl_post.models.quant4`).
    base_quant_block_size: B, the 4-bit block length along a projection's
      input; must be even and divide each projection's last input dim.
  """
  rank: int = 0
  alpha: float = 16.0
  dropout: float = 0.0
  targets: tuple[str, ...] = tuple(TARGETS)
  base_quant: str = ""
  base_quant_block_size: int = 64

  def __post_init__(self):
    object.__setattr__(self, "targets", tuple(self.targets))
    check(isinstance(self.rank, int) and not isinstance(self.rank, bool) and self.rank >= 0,
          "rank", "must be an int >= 0 (0 = LoRA off)", self.rank)
    check(isinstance(self.alpha, (int, float)) and self.alpha > 0, "alpha", "must be > 0",
          self.alpha)
    check(isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1, "dropout",
          "must be in [0, 1)", self.dropout)
    unknown = [t for t in self.targets if t not in TARGETS]
    check(not unknown, "targets", f"names unknown module(s) {unknown}; known: {tuple(TARGETS)}",
          self.targets)
    check(len(set(self.targets)) == len(self.targets), "targets", "has duplicates",
          self.targets)
    check(not self.enabled or self.targets, "targets", "must name at least one module when "
          "rank > 0", self.targets)
    check(self.base_quant in ("",) + quant.FORMATS, "base_quant",
          f"must be one of {('',) + quant.FORMATS}", self.base_quant)
    size = self.base_quant_block_size
    check(isinstance(size, int) and not isinstance(size, bool) and size >= 2 and size % 2 == 0,
          "base_quant_block_size", "must be an even int >= 2", size)
    check(self.enabled or not self.base_quant, "base_quant", "needs rank > 0 (only a frozen "
          "base is quantized)", self.base_quant)

  @classmethod
  def section_defaults(cls) -> dict:
    """The section with every default (what configs hold, so `--config.<x>.lora.rank=8`
    overrides it)."""
    return dataclasses.asdict(cls())

  @property
  def enabled(self) -> bool:
    return self.rank > 0

  @property
  def scale(self) -> float:
    return self.alpha / self.rank


def _geometry(config: ModelConfig, target: str):
  """(input dims, output dims) of one layer's projection, as (logical name, size) pairs."""
  e, h, k, d, f = (config.embed_dim, config.num_heads, config.num_kv_heads, config.head_dim,
                   config.mlp_dim)
  heads = (("heads", h), ("head_dim", d))
  kv = (("kv_heads", k), ("head_dim", d))
  return {"q_proj": ((("embed", e),), heads), "k_proj": ((("embed", e),), kv),
          "v_proj": ((("embed", e),), kv), "o_proj": (heads, (("embed", e),)),
          "gate": ((("embed", e),), (("mlp", f),)), "up": ((("embed", e),), (("mlp", f),)),
          "down": ((("mlp", f),), (("embed", e),))}[target]


def _tree(lora: LoraConfig, leaf_fn) -> dict:
  """{module: {target: leaf_fn(target)}} over `lora.targets`."""
  out = {}
  for target in lora.targets:
    out.setdefault(TARGETS[target][0], {})[target] = leaf_fn(target)
  return out


def adapter_logical_axes(config: ModelConfig, lora: LoraConfig) -> dict:
  """Logical axis names of every adapter leaf (for the sharding rules table)."""
  def axes(target):
    ins, outs = _geometry(config, target)
    return {"A_KxR": ("layers",) + tuple(n for n, _ in ins) + (RANK_AXIS,),
            "B_RxN": ("layers", RANK_AXIS) + tuple(n for n, _ in outs)}
  return _tree(lora, axes)


def init_adapters(config: ModelConfig, lora: LoraConfig, rng) -> dict:
  """Fresh adapters: A ~ U(-1/sqrt(K), 1/sqrt(K)) (PEFT's default), B = 0."""
  if not lora.enabled:
    raise ValueError("init_adapters needs lora.rank > 0")
  dtype = jnp.dtype(config.param_dtype)

  def leaves(target):
    ins, outs = _geometry(config, target)
    fan_in = 1
    for _, size in ins:
      fan_in *= size
    key = jax.random.fold_in(rng, list(TARGETS).index(target))
    bound = fan_in ** -0.5
    a_shape = (config.num_layers,) + tuple(s for _, s in ins) + (lora.rank,)
    b_shape = (config.num_layers, lora.rank) + tuple(s for _, s in outs)
    return {"A_KxR": jax.random.uniform(key, a_shape, dtype, -bound, bound),
            "B_RxN": jnp.zeros(b_shape, dtype)}
  return _tree(lora, leaves)


def abstract_adapters(config: ModelConfig, lora: LoraConfig):
  """Adapters as ShapeDtypeStructs (no allocation)."""
  return jax.eval_shape(lambda: init_adapters(config, lora, jax.random.key(0)))


def merge(params: dict, adapters: dict, lora: LoraConfig) -> dict:
  """Base params with every adapted projection W replaced by W + (alpha/r) A @ B
  (computed in float32, stored in W's dtype); other leaves are the base's own."""
  return merge_scaled(params, adapters, lora.scale)


def merge_scaled(params: dict, adapters: dict, scale) -> dict:
  """`merge` with the scale alpha/r given as a number (or a traced scalar)."""
  blocks = dict(params["blocks"])
  for module, targets in adapters.items():
    blocks[module] = dict(blocks[module])
    for target, adapter in targets.items():
      w = blocks[module][target]
      a, b = adapter["A_KxR"], adapter["B_RxN"]
      layers, r = a.shape[0], a.shape[-1]
      delta_LxKxN = jnp.einsum("lkr,lrn->lkn", a.reshape(layers, -1, r).astype(jnp.float32),
                               b.reshape(layers, r, -1).astype(jnp.float32))
      blocks[module][target] = (w.astype(jnp.float32)
                                + scale * delta_LxKxN.reshape(w.shape)).astype(w.dtype)
  return dict(params, blocks=blocks)


@flax.struct.dataclass
class Adapters:
  """What the layers read to add the adapters' update: `weights`
  ({module: {target: {"A_KxR", "B_RxN"}}}, B already scaled by alpha/r), and
  optional dropout `keys`, and with a quantized base its `scales`
  ({module: {target: array}}: int8 per output channel, or 4-bit per block)
  and for 4-bit the `codebook` levels [16] (and GGUF Q4_1 `offsets`, shaped
  like the scales), `rl_post.models.quant`. Built stacked over [L] by
  `for_model` (the codebook repeated per layer); the layer scan slices one
  layer's view out of it."""
  weights: dict
  keys: Any = None
  scales: Any = None
  codebook: Any = None
  offsets: Any = None
  dropout: float = flax.struct.field(pytree_node=False, default=0.0)

  def dense(self, module: str, target: str, x_MxK, w):
    """x @ w with w frozen (no gradient), plus the adapter's update if `target` has one.

    `w` is the layer's stored projection, any shape whose size is K * N (it is
    reshaped to [K, N]). With `scales` and no `codebook`, w holds int8 values and
    the product is scaled per output channel; with a `codebook`, w holds packed
    4-bit codes ([K / 2, N] in size), dequantized here to a [K, N] weight."""
    k = x_MxK.shape[-1]
    w = jax.lax.stop_gradient(w)
    if self.scales is None:
      y_MxN = dot_acc32(x_MxK, w.reshape(k, -1).astype(x_MxK.dtype))
    elif self.codebook is None:
      scale_N = jax.lax.stop_gradient(self.scales[module][target]).reshape(-1)
      y_MxN = (dot_acc32(x_MxK, w.reshape(k, -1).astype(x_MxK.dtype), jnp.float32)
               * scale_N[None]).astype(x_MxK.dtype)
    else:
      offset = None if self.offsets is None else self.offsets[module][target]
      y_MxN = _dequantized_dot(x_MxK, w, *jax.lax.stop_gradient(
          (self.scales[module][target], self.codebook, offset)))
    adapter = self.weights.get(module, {}).get(target)
    if adapter is None:
      return y_MxN
    r = adapter["A_KxR"].shape[-1]
    a_KxR = adapter["A_KxR"].reshape(-1, r).astype(x_MxK.dtype)
    b_RxN = adapter["B_RxN"].reshape(r, -1).astype(x_MxK.dtype)
    if self.keys is not None and self.dropout > 0:
      key = jax.random.fold_in(self.keys, list(TARGETS).index(target))
      keep = jax.random.bernoulli(key, 1.0 - self.dropout, x_MxK.shape)
      x_MxK = jnp.where(keep, x_MxK / (1.0 - self.dropout), 0).astype(x_MxK.dtype)
    return y_MxN + dot_acc32(dot_acc32(x_MxK, a_KxR), b_RxN)


@jax.checkpoint  # the backward dequantizes again: no float weight is kept for it
def _dequantized_dot(x_MxK, w, scale, levels_16, offset):
  """x @ W for one layer's packed 4-bit projection `w` (`quant.dequantize_layer_KxN`)."""
  return dot_acc32(x_MxK, quant.dequantize_layer_KxN(w, scale, levels_16, offset,
                                                     x_MxK.shape[-1], x_MxK.dtype))


def for_model(adapters: dict, lora: LoraConfig, num_layers: int, rng=None,
              quantized=None) -> Adapters:
  """The stacked `Adapters` the model's layer scan consumes: B scaled by alpha/r
  (gradients flow through the scaling to B), per-layer dropout keys when
  `rng` is given and `lora.dropout` > 0 (training; no dropout otherwise), and
  a quantized base's scales, codebook and offsets (`quantized`: the base
  from `quant.quantize_base`, whose "params" are not read here)."""
  weights = {module: {target: dict(adapter, B_RxN=adapter["B_RxN"] * lora.scale)
                      for target, adapter in targets.items()}
             for module, targets in adapters.items()}
  keys = None
  if rng is not None and lora.dropout > 0:
    keys = jax.random.split(rng, num_layers)
  quantized = quantized or {}
  levels = quantized.get("codebook")
  if levels is not None:  # the scan slices every leaf per layer
    levels = jnp.broadcast_to(levels, (num_layers,) + levels.shape)
  return Adapters(weights=weights, keys=keys, scales=quantized.get("scales"), codebook=levels,
                  offsets=quantized.get("offsets"), dropout=float(lora.dropout))


def model_inputs(trained, frozen, lora: LoraConfig | None, num_layers: int, rng=None):
  """(model params, Adapters or None) from a train state's trained and frozen trees:
  with adapters (`frozen` holds the base, float or quantized),
  the base behind a stop_gradient and the adapters to apply; without, the
  trained params themselves."""
  if frozen is None:
    return trained, None
  if lora is None or not lora.enabled:
    raise ValueError("a train state with frozen base params needs an enabled LoraConfig")
  quantized = None
  if quant.is_quantized(frozen):
    frozen, quantized = frozen["params"], frozen
  return jax.lax.stop_gradient(frozen), for_model(trained, lora, num_layers, rng, quantized)
