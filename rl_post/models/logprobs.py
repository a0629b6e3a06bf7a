"""Per-token log-probabilities of a sequence under the model, in chunks.

The sampler and the trainer share `scaled_log_softmax`, so the behaviour
log-prob recorded at sampling time and the one recomputed for the loss come
from the same maths. The trainer's path never materialises the [N, T, V]
logits: the trunk gives hidden states [N, T, E] (layers rematerialised by
`remat` policy), and logits, log-softmax and entropy are computed `chunk`
positions at a time under `jax.checkpoint`, so the backward pass recomputes
one chunk's logits instead of storing all of them.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from rl_post.models import transformer
from rl_post.models.matmul import matmul_f32_MxN
from rl_post.parallel import ring_attention

REMAT_POLICIES = ("none", "full", "dots")


def scaled_log_softmax(logits_xV, temperature: float):
  return jax.nn.log_softmax(logits_xV.astype(jnp.float32) / temperature, axis=-1)


def token_logprobs_from_logits(logits_BxTxV, tokens_BxT, temperature: float = 1.0):
  """logp_BxT[:, t] = log p(tokens[t] | tokens[<t]); entry 0 is 0.

  Also returns the per-position entropy of the predictive distribution
  (aligned the same way). Materialises [B, T, V]: for small batches (SFT,
  tests); the RL update uses `sequence_logprobs`.
  """
  logp_BxTxV = scaled_log_softmax(logits_BxTxV[:, :-1], temperature)
  next_BxT = tokens_BxT[:, 1:]
  logp = jnp.take_along_axis(logp_BxTxV, next_BxT[..., None], axis=-1)[..., 0]
  entropy = -(jnp.exp(logp_BxTxV) * logp_BxTxV).sum(-1)
  pad = jnp.zeros((tokens_BxT.shape[0], 1), jnp.float32)
  return jnp.concatenate([pad, logp], axis=1), jnp.concatenate([pad, entropy], axis=1)


def _remat(fn, policy: str):
  if policy == "none":
    return fn
  if policy == "full":
    return jax.checkpoint(fn)
  if policy == "dots":
    return jax.checkpoint(fn, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
  raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {policy!r}")


def hidden_states(model_config, params, tokens_BxT, *, remat: str = "none", context_mesh=None,
                  shared_prefix: tuple[int, int] | None = None, unroll: int = 1,
                  positions_BxT=None, segment_ids_BxT=None, lora=None):
  """Final-norm hidden states h_BxTxE (model dtype): the model minus its output layer.

  Same computation as `models.apply` up to the logits, with each layer of
  the scan rematerialised according to `remat` ("none" | "full" | "dots")
  and `unroll` layers per iteration of the scan (`RLConfig.unroll_layers`).
  `shared_prefix=(L, G)`: consecutive groups of G rows share their first L
  tokens (a GRPO group's prompt), and the layers run those L positions once
  per group instead of once per row (`shared_prefix_hidden_states`).
  `positions_BxT` and `segment_ids_BxT` (packed sequences, as in
  `transformer.apply`) default to 0..T-1 and one sequence per row.
  `lora`: optional stacked `rl_post.models.lora.Adapters` over frozen `params`.
  """
  if shared_prefix is not None:
    if context_mesh is not None or segment_ids_BxT is not None or positions_BxT is not None:
      raise ValueError("shared_prefix combines with neither context parallelism nor packed "
                       "positions and segments")
    return shared_prefix_hidden_states(model_config, params, tokens_BxT, *shared_prefix,
                                       remat=remat, unroll=unroll, lora=lora)
  model = nnx.merge(transformer.graphdef(model_config), params)
  if positions_BxT is None:
    positions_BxT = transformer.default_positions(tokens_BxT)
  perm = None
  if context_mesh is not None:
    perm = ring_attention.layout_permutation(model_config.context_layout, tokens_BxT.shape[1],
                                             context_mesh.shape["context"])
    tokens_BxT, positions_BxT = tokens_BxT[:, perm], positions_BxT[:, perm]
    if segment_ids_BxT is not None:
      segment_ids_BxT = segment_ids_BxT[:, perm]
  x_BxTxE = model.embed(tokens_BxT)
  block_graphdef, block_state = nnx.split(model.blocks)

  def layer(x, layer_inputs):
    layer_state, layer_lora = layer_inputs
    block = nnx.merge(block_graphdef, layer_state)
    return block(x, positions_BxT, segment_ids_BxT=segment_ids_BxT,
                 context_mesh=context_mesh, lora=layer_lora)[0], None

  x_BxTxE, _ = jax.lax.scan(_remat(layer, remat), x_BxTxE, (block_state, lora), unroll=unroll)
  x_BxTxE = model.final_norm(x_BxTxE)
  if perm is not None:
    x_BxTxE = x_BxTxE[:, ring_attention.inverse_permutation(perm)]
  return x_BxTxE


def shared_prefix_hidden_states(model_config, params, tokens_NxT, prefix_len: int,
                                group_size: int, *, remat: str = "none", unroll: int = 1,
                                lora=None):
  """`hidden_states` of N = P * G rows whose first `prefix_len` tokens are the
  same within each group of `group_size` consecutive rows (not checked here:
  `rl_post.rl.train_step.check_shared_prefix` checks a batch on the host).

  The prefix runs through the layers once per group ([P, L] rows), the
  suffixes once per row ([N, S]), attending to their group's prefix keys
  and values; the result is the same [N, T, E] (the prefix's states
  repeated), so its gradient sums over the group. With T = L + S, the
  layers do P*L + N*S rows of work instead of N*T.
  """
  n, t = tokens_NxT.shape
  if not 0 < prefix_len < t or group_size < 1 or n % group_size:
    raise ValueError(f"shared prefix needs 0 < prefix_len ({prefix_len}) < T ({t}) and rows "
                     f"({n}) a multiple of group_size ({group_size})")
  model = nnx.merge(transformer.graphdef(model_config), params)
  xp_PxLxE = model.embed(tokens_NxT[::group_size, :prefix_len])
  xs_NxSxE = model.embed(tokens_NxT[:, prefix_len:])
  block_graphdef, block_state = nnx.split(model.blocks)

  def layer(carry, layer_inputs):
    layer_state, layer_lora = layer_inputs
    block = nnx.merge(block_graphdef, layer_state)
    return block.shared_prefix(*carry, group_size, layer_lora), None

  (xp_PxLxE, xs_NxSxE), _ = jax.lax.scan(_remat(layer, remat), (xp_PxLxE, xs_NxSxE),
                                         (block_state, lora), unroll=unroll)
  h_PxLxE = model.final_norm(xp_PxLxE)
  return jnp.concatenate([jnp.repeat(h_PxLxE, group_size, axis=0),
                          model.final_norm(xs_NxSxE)], axis=1)


def output_matrix_ExV(model_config, params):
  """The output projection (the tied embedding transposed, or lm_head), model dtype."""
  if model_config.tie_embeddings:
    return params["embed"]["embedding"].astype(model_config.dtype).T
  return params["lm_head"].astype(model_config.dtype)


def _head_logits(h_BxCxE, w_ExV):
  """float32 logits of a chunk: h @ w as one 2-D matmul accumulated in f32
  (rl_post.models.matmul; h and w share the model's compute dtype)."""
  b, c, e = h_BxCxE.shape
  if h_BxCxE.dtype == w_ExV.dtype:
    return matmul_f32_MxN(h_BxCxE.reshape(b * c, e), w_ExV).reshape(b, c, -1)
  return jnp.einsum("bce,ev->bcv", h_BxCxE, w_ExV, preferred_element_type=jnp.float32)


def chunked_token_logprobs(h_BxTxE, w_ExV, tokens_BxT, temperature: float, chunk: int,
                           mask_BxT=None, *, remat: bool = True):
  """(logp_BxT, entropy_BxT) from hidden states, `chunk` positions at a time.

  Computed as `chunked_token_stats` is, without its top-1 indicator; see there.
  """
  return _chunked_stats(h_BxTxE, w_ExV, tokens_BxT, temperature, chunk, mask_BxT, remat=remat,
                        top1=False)


def chunked_token_stats(h_BxTxE, w_ExV, tokens_BxT, temperature: float, chunk: int,
                        mask_BxT=None, *, remat: bool = True):
  """(logp_BxT, entropy_BxT, top1_BxT) from hidden states, `chunk` positions at a time.

  Entry t is about token t given tokens < t (computed from h[:, t-1]);
  entry 0 is 0, as in `token_logprobs_from_logits`. Logits are f32.
  With `mask_BxT`, a chunk whose positions are all 0 in every row (prompt
  positions) is not computed, forward or backward, and its entries are 0;
  chunks are aligned to the end of the sequence, where responses sit, so a
  response of a multiple of `chunk` tokens after equal-length prompts
  costs no prompt logits at all.

  `remat=True` recomputes each chunk's logits in the backward, so at most
  one chunk's [B, C, V] is alive (forward or backward); `remat=False`
  keeps every chunk's logits and probabilities for the backward (about
  2 x [B, T, V] f32 held from the forward to the backward) and saves the
  recomputation: the head's matmul once more per chunk.

  top1_BxT is 1.0 where token t has the highest logit given tokens < t (the
  next-token accuracy of SFT), else 0.0.
  """
  return _chunked_stats(h_BxTxE, w_ExV, tokens_BxT, temperature, chunk, mask_BxT, remat=remat,
                        top1=True)


def _chunked_stats(h_BxTxE, w_ExV, tokens_BxT, temperature, chunk, mask_BxT, *, remat, top1):
  """The per-chunk loop of `chunked_token_stats`; `top1=False` leaves out the indicator."""
  if chunk < 1:
    raise ValueError(f"logprob chunk must be >= 1, got {chunk}")
  b, t, e = h_BxTxE.shape
  n = t - 1
  chunk = min(chunk, n)
  num_chunks = -(-n // chunk)
  pad = num_chunks * chunk - n  # at the front: the last chunk ends at the last position
  h_BxNxE = jnp.pad(h_BxTxE[:, :-1], ((0, 0), (pad, 0), (0, 0)))
  next_BxN = jnp.pad(tokens_BxT[:, 1:], ((0, 0), (pad, 0)))
  h_KxBxCxE = h_BxNxE.reshape(b, num_chunks, chunk, e).transpose(1, 0, 2, 3)
  next_KxBxC = next_BxN.reshape(b, num_chunks, chunk).transpose(1, 0, 2)
  if mask_BxT is None:
    live_K = jnp.ones((num_chunks,), bool)
  else:
    live_BxN = jnp.pad(mask_BxT[:, 1:] != 0, ((0, 0), (pad, 0)))
    live_K = live_BxN.reshape(b, num_chunks, chunk).any(axis=(0, 2))

  def compute(h_BxCxE, next_BxC):
    logits_BxCxV = _head_logits(h_BxCxE, w_ExV) / temperature
    lse_BxC = jax.nn.logsumexp(logits_BxCxV, axis=-1)
    picked_BxC = jnp.take_along_axis(logits_BxCxV, next_BxC[..., None], axis=-1)[..., 0]
    probs_BxCxV = jnp.exp(logits_BxCxV - lse_BxC[..., None])
    entropy_BxC = lse_BxC - (probs_BxCxV * logits_BxCxV).sum(-1)
    if not top1:
      return picked_BxC - lse_BxC, entropy_BxC
    hit_BxC = jax.lax.stop_gradient(picked_BxC >= logits_BxCxV.max(-1)).astype(jnp.float32)
    return picked_BxC - lse_BxC, entropy_BxC, hit_BxC

  def skip(h_BxCxE, next_BxC):
    del next_BxC
    zeros = jnp.zeros(h_BxCxE.shape[:2], jnp.float32)
    return (zeros,) * (3 if top1 else 2)

  def one_chunk(args):
    h_BxCxE, next_BxC, live = args
    if mask_BxT is None:
      return compute(h_BxCxE, next_BxC)
    return jax.lax.cond(live, compute, skip, h_BxCxE, next_BxC)

  if remat:
    one_chunk = jax.checkpoint(one_chunk)
  stats_KxBxC = jax.lax.map(one_chunk, (h_KxBxCxE, next_KxBxC, live_K))
  unchunk = lambda x: x.transpose(1, 0, 2).reshape(b, num_chunks * chunk)[:, pad:]
  zero = jnp.zeros((b, 1), jnp.float32)
  return tuple(jnp.concatenate([zero, unchunk(x_KxBxC)], axis=1) for x_KxBxC in stats_KxBxC)


def sequence_logprobs(model_config, params, tokens_BxT, temperature: float = 1.0,
                      context_mesh=None, *, chunk: int = 32, remat: str = "none",
                      shared_prefix: tuple[int, int] | None = None, mask_BxT=None):
  """Pure: (logp_BxT, entropy_BxT) of `tokens_BxT` under `params`, chunked
  (`mask_BxT`: chunks without a masked-in position skipped, as in
  `chunked_token_logprobs`)."""
  h_BxTxE = hidden_states(model_config, params, tokens_BxT, remat=remat,
                          context_mesh=context_mesh, shared_prefix=shared_prefix)
  return chunked_token_logprobs(h_BxTxE, output_matrix_ExV(model_config, params), tokens_BxT,
                                temperature, chunk, mask_BxT)
