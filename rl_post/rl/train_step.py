"""The GRPO update: recompute log-probs, clipped surrogate, KL, one step.

The batch holds N = B x G rollouts:
  tokens   [N, T] int32   prompt + response + padding
  mask     [N, T] int32   1 on response tokens
  old_logp [N, T] f32     behaviour log-probs from the sampler
  adv      [N]    f32     group advantages
  ref_logp [N, T] f32     frozen reference log-probs (only when kl_coef > 0)
"""

import jax
import jax.numpy as jnp

from rl_post.rl import algos
from rl_post.rl.config import GRPOConfig
from rl_post.rl.logprobs import sequence_logprobs
from rl_post.training.step import make_train_step


def make_rl_loss(model_config, rl: GRPOConfig, context_mesh=None):
  """`(params, batch, rng) -> (loss, metrics)` for the GRPO family.

  `context_mesh` (see `rl_post.parallel.mesh.context_mesh`) turns on ring
  attention over its `context` axis for the log-prob forward pass.
  """

  def loss_fn(params, batch, rng):
    del rng
    logp_NxT, entropy_NxT = sequence_logprobs(model_config, params, batch["tokens"],
                                              rl.temperature, context_mesh)
    loss, metrics = algos.policy_loss(
        logp_NxT, batch["old_logp"], batch["adv"], batch["mask"],
        ref_logp_NxT=batch.get("ref_logp"), clip_low=rl.clip_low, clip_high=rl.clip_high,
        kl_coef=rl.kl_coef, kl_estimator=rl.kl_estimator, aggregation=rl.aggregation)
    metrics["entropy"] = algos.aggregate(jax.lax.stop_gradient(entropy_NxT), batch["mask"])
    return loss, metrics

  return loss_fn


def make_rl_train_step(model_config, rl: GRPOConfig, optimizer, context_mesh=None):
  return make_train_step(make_rl_loss(model_config, rl, context_mesh), optimizer)


def make_ref_logprobs(model_config, rl: GRPOConfig, context_mesh=None):
  """Pure `(ref_params, tokens_NxT) -> ref_logp_NxT` (no gradients)."""

  def ref_logprobs(ref_params, tokens_NxT):
    params = jax.tree.map(lambda x: x.astype(jnp.float32), ref_params)
    return jax.lax.stop_gradient(
        sequence_logprobs(model_config, params, tokens_NxT, rl.temperature, context_mesh)[0])

  return ref_logprobs
