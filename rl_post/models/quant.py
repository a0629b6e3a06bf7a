"""Int8 weight-only quantization of the frozen base under LoRA (QLoRA, int8).

Each projection W [in, out] of every layer (q, k, v, o, gate, up, down) is
stored as int8 q with one float32 scale per output channel,
s_n = max_k |W_kn| / 127, q = round(W / s), so |W - q s| <= s / 2 per
entry. A matmul then never needs the float weight: x @ (q s) = (x @ q) s,
the int8 values cast to the compute dtype (exact: |q| <= 127) and the
scale applied to the output (`rl_post.models.lora.Adapters.dense`). For
x of M rows, the quantized product is within sum_k |x_mk| * s_n / 2 of the
float one (`error_bound_MxN`). Embeddings, norms and the output head stay
float.

Quantized base: `{"params": params with int8 projections, "scales":
{module: {target: [L, *out]}}}`.
"""

import math

import jax
import jax.numpy as jnp

PROJECTIONS = {"attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate", "up", "down")}
QMAX = 127


def _out_ndim(module: str, target: str) -> int:
  """How many trailing dims of a stacked projection [L, *in, *out] are its output."""
  return 2 if target in ("q_proj", "k_proj", "v_proj") else 1


def quantize_KxN(w_KxN):
  """(q_KxN int8, scale_N f32): symmetric per-output-channel int8; an all-zero
  channel gets scale 1 (its q is 0)."""
  w = w_KxN.astype(jnp.float32)
  scale_N = jnp.max(jnp.abs(w), axis=0) / QMAX
  scale_N = jnp.where(scale_N > 0, scale_N, 1.0)
  q = jnp.clip(jnp.round(w / scale_N[None]), -QMAX, QMAX).astype(jnp.int8)
  return q, scale_N


def error_bound_MxN(x_MxK, scale_N):
  """The largest |x @ W - (x @ q) s| quantization can give: sum_k |x_mk| * s_n / 2."""
  return jnp.abs(x_MxK.astype(jnp.float32)).sum(-1, keepdims=True) * scale_N[None] / 2


def quantize_base(params: dict) -> dict:
  """{"params", "scales"}: `params` with every block projection int8 (per layer, per
  output channel) and the scales, shaped [L, *out]."""
  blocks = {k: dict(v) for k, v in params["blocks"].items()}
  scales = {}
  for module, targets in PROJECTIONS.items():
    for target in targets:
      w = blocks[module][target]
      out_shape = w.shape[w.ndim - _out_ndim(module, target):]
      w_LxKxN = w.reshape(w.shape[0], -1, math.prod(out_shape))
      q, s = jax.vmap(quantize_KxN)(w_LxKxN)
      blocks[module][target] = q.reshape(w.shape)
      scales.setdefault(module, {})[target] = s.reshape((w.shape[0],) + out_shape)
  return {"params": dict(params, blocks=blocks), "scales": scales}


def dequantize_base(quantized: dict, dtype=None) -> dict:
  """Float params from `quantize_base`'s output: q * s per projection, in `dtype`
  (default: the embedding's, the params' own dtype)."""
  params = quantized["params"]
  dtype = params["embed"]["embedding"].dtype if dtype is None else dtype
  blocks = {k: dict(v) for k, v in params["blocks"].items()}
  for module, targets in quantized["scales"].items():
    for target, s in targets.items():
      q = blocks[module][target]
      s = s.reshape(s.shape[:1] + (1,) * (q.ndim - s.ndim) + s.shape[1:])
      blocks[module][target] = (q.astype(jnp.float32) * s).astype(dtype)
  return dict(params, blocks=blocks)


def scale_logical_axes(param_axes: dict) -> dict:
  """Logical axes of the scales: the projection's own, minus its input dims."""
  out = {}
  for module, targets in PROJECTIONS.items():
    for target in targets:
      axes = param_axes["blocks"][module][target]
      out.setdefault(module, {})[target] = (axes[0],) + axes[len(axes) - _out_ndim(
          module, target):]
  return out


def is_quantized(frozen) -> bool:
  """Whether a train state's frozen base is `quantize_base` output."""
  return isinstance(frozen, dict) and set(frozen) == {"params", "scales"}


def base_params(frozen) -> dict:
  """The frozen base as float params (a dequantized copy when it is int8)."""
  return dequantize_base(frozen) if is_quantized(frozen) else frozen
