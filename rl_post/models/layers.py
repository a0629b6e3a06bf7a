"""Transformer building blocks as Flax NNX modules.

Every parameter is an `nnx.Param` carrying `logical_axes` metadata; the
sharding rules table (`rl_post.parallel.sharding`) maps these names to mesh
axes, so no layer knows about meshes.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from rl_post.kernels import attention as attention_kernels
from rl_post.models import kv_cache, rope
from rl_post.models.config import ModelConfig
from rl_post.models.matmul import dense_MxN, dot_acc32, transposed_for_grad, weight_grad_KxN
from rl_post.parallel import ring_attention, sharding

_init = nnx.initializers


def _param(rngs, init, shape, dtype, logical_axes):
  return nnx.Param(init(rngs.params(), shape, dtype), logical_axes=logical_axes)


class RMSNorm(nnx.Module):
  """x / rms(x) * scale, computed in float32."""

  def __init__(self, dim: int, *, eps: float, param_dtype, rngs: nnx.Rngs):
    self.eps = eps
    self.scale = _param(rngs, _init.ones, (dim,), param_dtype, ("embed",))

  def __call__(self, x):
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    scale = self.scale[...].astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
    return (normed * scale).astype(x.dtype)


class Embed(nnx.Module):
  """Token embedding; `attend` gives tied output logits."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.dtype = config.dtype
    self.embedding = _param(rngs, _init.normal(0.02), (config.vocab_size, config.embed_dim),
                            config.param_dtype, ("vocab", "embed"))

  def __call__(self, tokens_BxT):
    return jnp.take(self.embedding[...], tokens_BxT, axis=0).astype(self.dtype)

  def attend(self, x_BxTxE):
    return jnp.einsum("bte,ve->btv", x_BxTxE, self.embedding[...].astype(self.dtype),
                      preferred_element_type=jnp.float32)


@jax.custom_vjp
def swiglu_MxE(x_MxE, gate_ExF, up_ExF, down_FxE):
  """down(silu(x gate) * (x up)) on 2-D rows, with a hand-written backward.

  Same maths as autodiff of the forward; the backward saves only the
  two [M, F] pre-activations (autodiff also keeps sigmoid, silu and their
  product) and writes every gradient as a plain 2-D matmul.
  """
  return _swiglu_fwd(x_MxE, gate_ExF, up_ExF, down_FxE)[0]


def _swiglu_fwd(x_MxE, gate_ExF, up_ExF, down_FxE):
  gate_MxF = dot_acc32(x_MxE, gate_ExF)
  up_MxF = dot_acc32(x_MxE, up_ExF)
  out_MxE = dot_acc32(jax.nn.silu(gate_MxF) * up_MxF, down_FxE)
  return out_MxE, (x_MxE, gate_MxF, up_MxF, gate_ExF, up_ExF, down_FxE)


def _swiglu_bwd(residuals, d_out_MxE):
  x_MxE, gate_MxF, up_MxF, gate_ExF, up_ExF, down_FxE = residuals
  sig_MxF = jax.nn.sigmoid(gate_MxF)
  silu_MxF = gate_MxF * sig_MxF
  d_out_MxE = d_out_MxE.astype(x_MxE.dtype)
  d_hidden_MxF = dot_acc32(d_out_MxE, down_FxE.T)
  d_up_MxF = d_hidden_MxF * silu_MxF
  d_gate_MxF = d_hidden_MxF * up_MxF * (sig_MxF * (1 + gate_MxF * (1 - sig_MxF)))
  d_x_MxE = (dot_acc32(d_gate_MxF, gate_ExF.T, jnp.float32)
             + dot_acc32(d_up_MxF, up_ExF.T, jnp.float32)).astype(x_MxE.dtype)
  x_ExM = transposed_for_grad(x_MxE)
  return (d_x_MxE, dot_acc32(x_ExM, d_gate_MxF), dot_acc32(x_ExM, d_up_MxF),
          weight_grad_KxN(silu_MxF * up_MxF, d_out_MxE))


swiglu_MxE.defvjp(_swiglu_fwd, _swiglu_bwd)


class MLP(nnx.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    e, f, pd = config.embed_dim, config.mlp_dim, config.param_dtype
    self.dtype = config.dtype
    self.gate = _param(rngs, _init.lecun_normal(), (e, f), pd, ("embed", "mlp"))
    self.up = _param(rngs, _init.lecun_normal(), (e, f), pd, ("embed", "mlp"))
    self.down = _param(rngs, _init.lecun_normal(), (f, e), pd, ("mlp", "embed"))

  def __call__(self, x_BxTxE, lora=None):
    """`lora`: optional per-layer `rl_post.models.lora.Adapters` (frozen weights,
    adapters added at each matmul; plain autodiff instead of `swiglu_MxE`'s
    hand-written backward, which would compute the frozen weights' gradients)."""
    dt = self.dtype
    # [B*T, E] rows: XLA:CPU runs the backward of 2-D matmuls much faster than 3-D einsums
    x_MxE = x_BxTxE.reshape(-1, x_BxTxE.shape[-1])
    if lora is None:
      weights = (self.gate[...].astype(dt), self.up[...].astype(dt), self.down[...].astype(dt))
      return swiglu_MxE(x_MxE, *weights).reshape(x_BxTxE.shape)
    # the stored weights as they are (a quantized base is dequantized by `lora.dense`)
    gate_MxF = lora.dense("mlp", "gate", x_MxE, self.gate[...])
    up_MxF = lora.dense("mlp", "up", x_MxE, self.up[...])
    out_MxE = lora.dense("mlp", "down", jax.nn.silu(gate_MxF) * up_MxF, self.down[...])
    return out_MxE.reshape(x_BxTxE.shape)


class Attention(nnx.Module):
  """Grouped-query self-attention with RoPE and an optional KV cache."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    e, h, k, d = config.embed_dim, config.num_heads, config.num_kv_heads, config.head_dim
    pd = config.param_dtype
    self.dtype = config.dtype
    self.impl = config.attention_impl
    self.cache_layout = kv_cache.layout(config)
    self.context_layout = config.context_layout
    self.rope_args = (d, config.rope_theta, config.rope_scaling)
    init = _init.lecun_normal(in_axis=0, out_axis=(1, 2))
    self.q_proj = _param(rngs, init, (e, h, d), pd, ("embed", "heads", "head_dim"))
    self.k_proj = _param(rngs, init, (e, k, d), pd, ("embed", "kv_heads", "head_dim"))
    self.v_proj = _param(rngs, init, (e, k, d), pd, ("embed", "kv_heads", "head_dim"))
    self.o_proj = _param(rngs, _init.lecun_normal(in_axis=(0, 1), out_axis=2),
                         (h, d, e), pd, ("heads", "head_dim", "embed"))
    if config.qkv_bias:
      self.q_bias = _param(rngs, _init.zeros, (h, d), pd, ("heads", "head_dim"))
      self.k_bias = _param(rngs, _init.zeros, (k, d), pd, ("kv_heads", "head_dim"))
      self.v_bias = _param(rngs, _init.zeros, (k, d), pd, ("kv_heads", "head_dim"))
    else:
      self.q_bias = self.k_bias = self.v_bias = None

  def _qkv(self, x_BxTxE, positions_BxT, lora=None):
    """Queries and keys with RoPE at `positions_BxT`, and values."""
    inv_freq = rope.inverse_frequencies(*self.rope_args)
    q = rope.apply_rope(self._project(x_BxTxE, self.q_proj, self.q_bias, lora, "q_proj"),
                        positions_BxT, inv_freq)
    k = rope.apply_rope(self._project(x_BxTxE, self.k_proj, self.k_bias, lora, "k_proj"),
                        positions_BxT, inv_freq)
    return q, k, self._project(x_BxTxE, self.v_proj, self.v_bias, lora, "v_proj")

  def _project(self, x_BxTxE, kernel, bias, lora=None, target=""):
    b, t, e = x_BxTxE.shape
    _, h, d = kernel.shape  # a 4-bit kernel packs E: [E / 2, H, D]
    if lora is None:
      out = dense_MxN(x_BxTxE.reshape(b * t, e), kernel[...].astype(self.dtype).reshape(e, h * d))
    else:
      out = lora.dense("attn", target, x_BxTxE.reshape(b * t, e), kernel[...])
    out = out.reshape(b, t, h, d)
    if bias is not None:
      out = out + bias[...].astype(self.dtype)[None, None]
    return out

  def __call__(self, x_BxTxE, positions_BxT, *, segment_ids_BxT=None, cache=None,
               context_mesh=None, cache_extend=False, lora=None):
    """Self-attention over x; with `cache`, also reads/writes the KV cache.

    Args:
      x_BxTxE: inputs.
      positions_BxT: absolute positions (RoPE and cache slots).
      segment_ids_BxT: optional packed-sequence ids (no cache).
      context_mesh: a mesh with a `context` axis > 1: ring attention over
        it, with x already in `config.context_layout` token order.
      cache: optional dict with "k", "v" in `kv_cache.layout(config)`. With T > 1
        this is a prefill that starts at slot 0; with T == 1 a decode step
        at slot positions_BxT[:, 0].
      cache_extend: with a cache and T > 1, the chunk is written at slots
        positions_BxT and each query attends to every cache slot <= its
        position (earlier slots included): a prefill onto an existing cache.
      lora: optional per-layer `rl_post.models.lora.Adapters` on the projections.
    Returns:
      (out_BxTxE, new_cache or None).
    """
    q, k, v = self._qkv(x_BxTxE, positions_BxT, lora)
    new_cache = None
    if cache is not None:
      new_cache = kv_cache.write(cache, k, v, positions_BxT, self.cache_layout)
    if context_mesh is not None:
      if cache is not None:
        raise ValueError("context parallelism applies to full sequences, not KV-cache decoding")
      batch_axes = tuple(a for a in ("data", "fsdp") if context_mesh.shape[a] > 1) or None
      out = ring_attention.ring_attention(
          q, k, v, mesh=context_mesh, axis_name="context", causal=True,
          segment_ids=segment_ids_BxT, layout=self.context_layout, batch_axis=batch_axes)
    elif cache is not None and cache_extend:
      out = cached_chunk_attention(q, *kv_cache.as_bskd(new_cache, self.cache_layout),
                                   positions_BxT)
    elif cache is not None and x_BxTxE.shape[1] == 1:
      out = attention_kernels.decode_attention(
          q[:, 0], new_cache["k"], new_cache["v"], positions_BxT[:, 0] + 1,
          impl=self.impl, kv_layout=self.cache_layout)[:, None]
    else:
      out = attention_kernels.flash_attention(
          q, k, v, causal=True, segment_ids=segment_ids_BxT, impl=self.impl)
    return self._output(out, lora), new_cache

  def _output(self, out_BxTxHxD, lora=None):
    # (heads, head_dim) flattened on both sides: one plain 2-D matmul, so XLA
    # never transposes o_proj (it did, on every decode step).
    b, t, h, d = out_BxTxHxD.shape
    out_MxHD = out_BxTxHxD.astype(self.dtype).reshape(b * t, h * d)
    if lora is not None:  # the stored o_proj as it is (4-bit: [H, D / 2, E])
      return lora.dense("attn", "o_proj", out_MxHD, self.o_proj[...]).reshape(b, t, -1)
    o_proj_HDxE = self.o_proj[...].astype(self.dtype).reshape(h * d, -1)
    return dense_MxN(out_MxHD, o_proj_HDxE).reshape(b, t, -1)

  def shared_prefix(self, xp_PxLxE, xs_NxSxE, group_size: int, lora=None):
    """Causal self-attention of N = P * G rows whose first L tokens repeat in
    each group of G consecutive rows, given the prefix once per group.

    Equal to `__call__` over the N full rows at positions 0..L+S-1: the
    prefix attends to itself; each suffix row attends to its group's prefix
    keys and values (repeated, not recomputed) and causally to its own.
    Returns (out_PxLxE, out_NxSxE).
    """
    def positions(x_BxTxE, start: int):
      return jnp.broadcast_to(start + jnp.arange(x_BxTxE.shape[1], dtype=jnp.int32),
                              x_BxTxE.shape[:2])

    qp, kp, vp = self._qkv(xp_PxLxE, positions(xp_PxLxE, 0), lora)
    qs, ks, vs = self._qkv(xs_NxSxE, positions(xs_NxSxE, xp_PxLxE.shape[1]), lora)
    out_p = attention_kernels.flash_attention(qp, kp, vp, causal=True, impl=self.impl)
    whole = lambda prefix, own: jnp.concatenate([jnp.repeat(prefix, group_size, axis=0), own], 1)
    # queries are aligned to the end of the keys: suffix position L + i sees keys <= L + i
    out_s = attention_kernels.flash_attention(qs, whole(kp, ks), whole(vp, vs), causal=True,
                                              impl=self.impl)
    return self._output(out_p, lora), self._output(out_s, lora)


def cached_chunk_attention(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, positions_BxT):
  """Dense attention of a query chunk over a whole KV cache (GQA, f32 softmax).

  Query t of row b sees cache slots s <= positions_BxT[b, t]; used for
  multi-token prefill onto a cache that already holds earlier tokens.
  """
  b, t, h, d = q_BxTxHxD.shape
  kv = k_BxSxKxD.shape[2]
  q = q_BxTxHxD.reshape(b, t, kv, h // kv, d).astype(jnp.float32)
  scores = jnp.einsum("btkgd,bskd->bkgts", q, k_BxSxKxD.astype(jnp.float32)) * d ** -0.5
  slots_S = jnp.arange(k_BxSxKxD.shape[1])
  visible_BxTxS = slots_S[None, None, :] <= positions_BxT[:, :, None]
  scores = jnp.where(visible_BxTxS[:, None, None], scores, -jnp.inf)
  probs = jax.nn.softmax(scores, axis=-1)
  out = jnp.einsum("bkgts,bskd->btkgd", probs, v_BxSxKxD.astype(jnp.float32))
  return out.reshape(b, t, h, d).astype(q_BxTxHxD.dtype)


class Block(nnx.Module):
  """Pre-norm transformer block: x + attn(norm(x)); x + mlp(norm(x))."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    kw = dict(eps=config.norm_eps, param_dtype=config.param_dtype, rngs=rngs)
    self.attn_norm = RMSNorm(config.embed_dim, **kw)
    self.attn = Attention(config, rngs=rngs)
    self.mlp_norm = RMSNorm(config.embed_dim, **kw)
    self.mlp = MLP(config, rngs=rngs)

  def __call__(self, x_BxTxE, positions_BxT, *, segment_ids_BxT=None, cache=None,
               context_mesh=None, cache_extend=False, lora=None):
    # the residual stream, and so what each layer keeps for backward, is split over `batch`
    # (with fsdp the partitioner would otherwise follow the params and split it over `embed`)
    x_BxTxE = sharding.constrain_batch(x_BxTxE)
    attn_out, new_cache = self.attn(self.attn_norm(x_BxTxE), positions_BxT,
                                    segment_ids_BxT=segment_ids_BxT, cache=cache,
                                    context_mesh=context_mesh, cache_extend=cache_extend,
                                    lora=lora)
    x_BxTxE = sharding.constrain_batch(x_BxTxE + attn_out)
    x_BxTxE = x_BxTxE + self.mlp(self.mlp_norm(x_BxTxE), lora)
    return sharding.constrain_batch(x_BxTxE), new_cache

  def shared_prefix(self, xp_PxLxE, xs_NxSxE, group_size: int, lora=None):
    """The block over N = P * G rows that share their first L tokens per group
    of G, the prefix computed once per group (`Attention.shared_prefix`)."""
    xp_PxLxE, xs_NxSxE = sharding.constrain_batch(xp_PxLxE), sharding.constrain_batch(xs_NxSxE)
    ap, as_ = self.attn.shared_prefix(self.attn_norm(xp_PxLxE), self.attn_norm(xs_NxSxE),
                                      group_size, lora)
    xp_PxLxE, xs_NxSxE = xp_PxLxE + ap, xs_NxSxE + as_
    xp_PxLxE = xp_PxLxE + self.mlp(self.mlp_norm(xp_PxLxE), lora)
    xs_NxSxE = xs_NxSxE + self.mlp(self.mlp_norm(xs_NxSxE), lora)
    return sharding.constrain_batch(xp_PxLxE), sharding.constrain_batch(xs_NxSxE)
