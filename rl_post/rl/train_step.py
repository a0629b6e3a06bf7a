"""The RL update: recompute log-probs in chunks, the algorithm's loss, one optimizer step.

A minibatch holds n rollouts (all [n, T] unless noted):
  tokens     int32   prompt + response + padding
  mask       int32   1 on trained response tokens (0 for dropped sequences)
  old_logp   f32     behaviour log-probs from the sampler (the masters' own,
                     recomputed, with `rl.rollout_precision` or TIS/MIS)
  is_weight  f32     off-policy importance weight (only with TIS/MIS:
                     rl_post/rl/off_policy.py)
  adv        f32     per-token advantages (the algorithm's estimator)
  ref_logp   f32     frozen reference log-probs  (only when kl_coef > 0)
  old_values f32     critic values at sampling time (only with a critic)
  returns    f32     value targets                (only with a critic)
It is split into `rl.grad_accum` micro-batches whose gradients are summed
in a `lax.scan`; every loss term is normalised by the whole minibatch's
`Totals`, so this is the same update as one pass over the minibatch.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl_post.rl import losses, off_policy, shape_buckets
from rl_post.rl.algorithm import AdvantageInputs, LossInputs
from rl_post.rl.config import RLConfig
from rl_post.rl.critic import critic_values
from rl_post.models.logprobs import chunked_token_logprobs, hidden_states, output_matrix_ExV
from rl_post.models.logprobs import sequence_logprobs
from rl_post.models import lora as lora_lib
from rl_post.training import guard


def batch_ndims(rl: RLConfig) -> dict[str, int]:
  """The minibatch's keys and their ranks for this config."""
  keys = dict(tokens=2, mask=2, old_logp=2, adv=2)
  if rl.needs_reference:
    keys["ref_logp"] = 2
  if rl.uses_critic:
    keys.update(old_values=2, returns=2)
  if rl.corrects_off_policy:
    keys["is_weight"] = 2
  return keys


def prefix_rung(length: int, rl: RLConfig | None = None) -> int:
  """The longest shared-prefix length <= `length` that the update compiles for:
  a rung of `rl.prefix_buckets` (default 8, 16, 24, 32, 48, 64, 96, ...:
  rl/shape_buckets.py). A run compiles one update per rung its batches reach
  (`RLComponents.step_fn_for`)."""
  buckets = shape_buckets.prefix_buckets(rl, length) if rl is not None else (
      shape_buckets.default_prefix_buckets(length))
  return shape_buckets.round_prefix(length, buckets)


def used_width(rl: RLConfig, prompt_lens_B, mask_BxT) -> int:
  """The update's time width: where the last row ends (its prompt, or its last
  response token, appended ones included), rounded up to a multiple of
  `rl.width_multiple` and at most the rollout's width; the rollout's width
  when `rl.width_multiple` is 0."""
  mask_BxT = np.asarray(mask_BxT)
  full_width = mask_BxT.shape[1]
  if not rl.width_multiple:
    return full_width
  has_response_B = mask_BxT.any(axis=1)
  last_end_B = np.where(has_response_B, full_width - np.argmax(mask_BxT[:, ::-1] != 0, axis=1), 0)
  end = max(int(np.max(prompt_lens_B, initial=1)), int(np.max(last_end_B, initial=1)))
  return min(full_width, -(-end // rl.width_multiple) * rl.width_multiple)


def trim_batch(batch: dict, width: int) -> dict:
  """The update batch cut to its first `width` positions (every [N, T] leaf)."""
  return {k: v[:, :width] if np.ndim(v) == 2 else v for k, v in batch.items()}


def shared_prefix_len(rl: RLConfig, tokens_NxT) -> int:
  """How many leading positions every group of G consecutive rows shares (host numpy),
  rounded down to a rung of `prefix_rung`; 0 when `rl.shared_prefix` is off
  or there is nothing to share (then the update runs every row whole).

  Rollouts put each response right after its prompt, so a group shares at
  least its prompt; the batch shares the shortest group's common prefix.
  """
  tokens = np.asarray(tokens_NxT)
  n, t = tokens.shape
  g = rl.num_generations
  if not rl.shared_prefix or n % g or t < 2:
    return 0
  grouped_PxGxT = tokens.reshape(n // g, g, t)
  same_PxT = (grouped_PxGxT == grouped_PxGxT[:, :1]).all(axis=1)
  common_P = np.where(same_PxT.all(axis=1), t, np.argmin(same_PxT, axis=1))
  shared = min(int(common_P.min()), t - 1)  # at least one position per row stays its own
  return prefix_rung(shared, rl)


def minibatches(batch: dict, rl: RLConfig, key) -> list[dict]:
  """epochs x minibatches slices of the rollout batch, shuffled per epoch
  (by whole groups, each kept in order, with `rl.shared_prefix`)."""
  n, g = rl.rollouts_per_step, rl.num_generations
  size = n // rl.num_minibatches
  out = []
  for epoch in range(rl.num_epochs):
    if rl.shared_prefix:
      groups = np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), n // g))
      order = (groups[:, None] * g + np.arange(g)[None]).reshape(-1)
    else:
      order = np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), n))
    for i in range(rl.num_minibatches):
      idx = order[i * size:(i + 1) * size]
      out.append({k: v[idx] for k, v in batch.items()})
  return out


def make_rl_loss(model_config, rl: RLConfig, context_mesh=None, prefix_len: int = 0):
  """`(params, critic, batch, totals) -> (loss, metrics)` for `rl.algorithm`.

  `prefix_len` > 0: every group of G consecutive rows shares its first
  `prefix_len` tokens (`shared_prefix_len`), and the layers run them once
  per group (`rl_post.models.logprobs.shared_prefix_hidden_states`).
  """
  alg, cfg = rl.entry, rl.algo
  shared = (prefix_len, rl.num_generations) if prefix_len else None

  def loss_fn(params, critic, batch, totals, frozen=None):
    """`params` are what trains: the model's, or with LoRA the adapters over `frozen`."""
    tokens_NxT, mask_NxT = batch["tokens"], batch["mask"]
    params, adapters = lora_lib.model_inputs(params, frozen, rl.lora, model_config.num_layers)
    h_NxTxE = hidden_states(model_config, params, tokens_NxT, remat=rl.remat,
                            context_mesh=context_mesh, shared_prefix=shared,
                            unroll=min(rl.unroll_layers, model_config.num_layers),
                            lora=adapters)
    logp_NxT, entropy_NxT = chunked_token_logprobs(
        h_NxTxE, output_matrix_ExV(model_config, params), tokens_NxT, rl.temperature,
        rl.logprob_chunk, mask_NxT, remat=rl.logprob_remat)  # no logits for prompt-only chunks
    inputs = LossInputs(logp_NxT=logp_NxT, entropy_NxT=entropy_NxT,
                        old_logp_NxT=batch["old_logp"], adv_NxT=batch["adv"],
                        mask_NxT=mask_NxT, ref_logp_NxT=batch.get("ref_logp"),
                        is_weight_NxT=batch.get("is_weight"))
    loss, metrics = alg.loss(cfg, inputs, totals)
    if critic is not None:
      values_NxT = critic_values(cfg.critic, model_config, critic, h_NxTxE, tokens_NxT,
                                 remat=rl.remat, context_mesh=context_mesh)
      v_loss, v_metrics = losses.value_loss(values_NxT, batch["old_values"], batch["returns"],
                                            mask_NxT, value_clip=cfg.value_clip,
                                            totals=totals)
      loss = loss + cfg.vf_coef * v_loss
      metrics.update(v_metrics)
    return loss, metrics

  return loss_fn


def _split(batch, parts: int):
  return jax.tree.map(lambda x: x.reshape((parts, x.shape[0] // parts) + x.shape[1:]), batch)


def accumulated_grads(loss_fn, params, critic, batch, grad_accum: int):
  """(loss, metrics, grads) summed over `grad_accum` micro-batches (exact: see module doc)."""
  totals = losses.totals_of(batch["mask"])
  grad_fn = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)
  if grad_accum == 1:
    (loss, metrics), grads = grad_fn(params, critic, batch, totals)
    return loss, metrics, grads

  def body(acc, micro):
    out = grad_fn(params, critic, micro, totals)
    return jax.tree.map(jnp.add, acc, out), None

  micro_batches = _split(batch, grad_accum)
  first = jax.tree.map(lambda x: x[0], micro_batches)
  zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(grad_fn, params, critic, first, totals))
  ((loss, metrics), grads), _ = jax.lax.scan(body, zeros, micro_batches)
  return loss, metrics, grads


def make_rl_train_step(model_config, rl: RLConfig, optimizer, critic_optimizer=None,
                       context_mesh=None, prefix_len: int = 0):
  """Pure `train_step(state, batch) -> (state, metrics)`; updates the critic if there is one.

  Like `rl_post.training.step.make_train_step`, an update whose loss or
  gradient norms are not finite is skipped and reported as
  `metrics["guard/skipped"]` (so is a non-finite update norm).
  """
  loss_fn = make_rl_loss(model_config, rl, context_mesh, prefix_len)

  def train_step(state, batch):
    # with LoRA the frozen base rides along undifferentiated: no gradient of it exists
    loss, metrics, (grads, critic_grads) = accumulated_grads(
        functools.partial(loss_fn, frozen=state.frozen), state.params, state.critic, batch,
        rl.grad_accum)
    grad_norm = optax.tree.norm(grads)
    norms = [loss, grad_norm]
    if state.critic is not None:
      metrics["critic_grad_norm"] = optax.tree.norm(critic_grads)
      norms.append(metrics["critic_grad_norm"])
    # A non-finite update is skipped (state unchanged, step advances): rl_post.training.guard;
    # decided before the update, which then runs in place (guard.apply_if)
    ok = guard.all_finite(*norms)
    params, opt_state, update_norm = guard.apply_if(ok, optimizer, grads, state.opt_state,
                                                    state.params)
    metrics = dict(metrics, loss=loss, grad_norm=grad_norm, update_norm=update_norm)
    state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    if state.critic is not None:
      critic, critic_opt_state, _ = guard.apply_if(ok, critic_optimizer, critic_grads,
                                                   state.critic_opt_state, state.critic)
      state = state.replace(critic=critic, critic_opt_state=critic_opt_state)
    metrics["guard/skipped"] = 1.0 - guard.all_finite(ok, update_norm).astype(loss.dtype)
    return state, metrics

  return train_step


def make_ref_logprobs(model_config, rl: RLConfig, context_mesh=None, prefix_len: int = 0):
  """Pure `(ref_params, tokens_NxT, mask_NxT=None) -> ref_logp_NxT`, chunked like the
  update (no gradients); `prefix_len` as in `make_rl_loss`.

  With the loss mask, a chunk of positions that no row trains on (prompts)
  gets no logits and its entries are 0, as in the update: the KL reads the
  reference only where the mask is 1.
  """
  shared = (prefix_len, rl.num_generations) if prefix_len else None

  def ref_logprobs(ref_params, tokens_NxT, mask_NxT=None):
    params = jax.tree.map(lambda x: x.astype(jnp.float32), ref_params)
    logp_NxT, _ = sequence_logprobs(model_config, params, tokens_NxT, rl.temperature,
                                    context_mesh, chunk=rl.logprob_chunk,
                                    shared_prefix=shared, mask_BxT=mask_NxT)
    return jax.lax.stop_gradient(logp_NxT)

  return ref_logprobs


def make_value_fn(model_config, rl: RLConfig, context_mesh=None):
  """Pure `(params, critic, tokens_NxT, frozen=None) -> values_NxT` at sampling time
  (`frozen`: the base, with LoRA adapters as `params`)."""

  def values(params, critic, tokens_NxT, frozen=None):
    h_NxTxE = None
    if rl.algo.critic == "head":
      params, adapters = lora_lib.model_inputs(params, frozen, rl.lora, model_config.num_layers)
      h_NxTxE = hidden_states(model_config, params, tokens_NxT, context_mesh=context_mesh,
                              lora=adapters)
    return jax.lax.stop_gradient(critic_values(rl.algo.critic, model_config, critic, h_NxTxE,
                                               tokens_NxT, context_mesh=context_mesh))

  return values


@functools.partial(jax.jit, static_argnums=0)
def _estimate(rl: RLConfig, rewards_N, mask_NxT, old_logp_NxT, process_NxT, ref_logp_NxT,
              values_NxT):
  inputs = AdvantageInputs(
      rewards_N=rewards_N.astype(jnp.float32), mask_NxT=mask_NxT, old_logp_NxT=old_logp_NxT,
      group_size=rl.num_generations, max_new_tokens=rl.max_new_tokens, process_NxT=process_NxT,
      ref_logp_NxT=ref_logp_NxT, values_NxT=values_NxT)
  out = rl.entry.advantages(rl.algo, inputs)
  mask = mask_NxT.astype(jnp.int32) * out.keep_N[:, None].astype(jnp.int32)
  return out._replace(keep_N=mask)


def rollout_batch(rl: RLConfig, tokens_NxT, mask_NxT, old_logp_NxT, rewards_N, *,
                  ref_logp_NxT=None, values_NxT=None, process_NxT=None,
                  trainer_logp_NxT=None) -> dict:
  """The update's batch (numpy) from a scored rollout: runs the algorithm's estimator.

  Sequences the estimator drops (keep 0, e.g. DAPO's zero-variance groups)
  keep their rows with an all-zero mask, so batch shapes never change.
  `old_logp_NxT` are the sampler's (behaviour) log-probs; `trainer_logp_NxT`,
  when given (`rl.recomputes_logp`), the masters' own of the same tokens:
  they become the batch's old log-probs, and with TIS/MIS the importance
  weights of the one against the other become `is_weight`.
  """
  is_weight_NxT = None
  if trainer_logp_NxT is not None:
    if rl.corrects_off_policy:
      is_weight_NxT = off_policy.importance_weight_NxT(
          jnp.asarray(trainer_logp_NxT), jnp.asarray(old_logp_NxT), jnp.asarray(mask_NxT),
          tis_cap=rl.tis_cap, mis_low=rl.mis_low, mis_high=rl.mis_high)
    old_logp_NxT = trainer_logp_NxT
  out = _estimate(rl, jnp.asarray(rewards_N), jnp.asarray(mask_NxT), jnp.asarray(old_logp_NxT),
                  process_NxT, ref_logp_NxT, values_NxT)
  batch = dict(tokens=tokens_NxT, mask=out.keep_N, old_logp=old_logp_NxT, adv=out.adv_NxT)
  if rl.needs_reference:
    batch["ref_logp"] = ref_logp_NxT
  if rl.uses_critic:
    batch.update(old_values=values_NxT, returns=out.returns_NxT)
  if rl.corrects_off_policy:
    if is_weight_NxT is None:
      raise ValueError("rl.tis_cap / rl.mis_high need the trainer's log-probs "
                       "(trainer_logp_NxT)")
    batch["is_weight"] = is_weight_NxT
  return jax.tree.map(np.asarray, jax.device_get(batch))
