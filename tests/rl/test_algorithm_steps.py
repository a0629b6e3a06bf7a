"""One update step of every registered algorithm on a tiny model, and PPO learning.

The step under test runs with everything that saves memory turned on
(chunked log-softmax, remat, gradient accumulation over 2 micro-batches);
it must give the update of a plain full-logits reference loss, and lower
the algorithm's own loss on its batch.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_post import models
from rl_post.rl import config as rl_config
from rl_post.rl import critic as critic_lib
from rl_post.rl import losses
from rl_post.rl.algorithm import LossInputs
from rl_post.models.logprobs import hidden_states, token_logprobs_from_logits
from rl_post.rl.train_step import make_rl_train_step, make_value_fn, rollout_batch
from rl_post.sampling.sampler import SamplingConfig, generate
from rl_post.training.state import TrainState

MODEL = models.ModelConfig(vocab_size=61, num_layers=2, embed_dim=32, num_heads=4,
                           num_kv_heads=2, head_dim=8, mlp_dim=64, tie_embeddings=False)
B, G, P, R = 2, 4, 3, 6
SETTINGS = {  # exercise each algorithm's distinctive options
    "grpo": dict(kl_coef=0.05, entropy_coef=0.01),
    "dr_grpo": dict(),
    "dapo": dict(overlong_buffer=3),
    "gspo": dict(),
    "rloo": dict(kl_coef=0.05, dual_clip=3.0),
    "reinforce_pp": dict(kl_coef=0.05),
    "ppo": dict(kl_coef=0.05, critic="head"),
    "ppo_separate": dict(critic="separate"),
}


def _rl(name, algo=None, **run):
  algorithm = "ppo" if name.startswith("ppo") else name
  section = dict(algorithm=algorithm, batch_size=B, num_generations=G, max_new_tokens=R,
                 max_prompt_len=P, **dict(dict(grad_accum=2, logprob_chunk=3, remat="full"), **run))
  section[algorithm] = SETTINGS[name] if algo is None else algo
  return rl_config.load(section)


@jax.jit
def _rollout(params, rng):
  """A fake scored rollout: random tokens, ragged response masks, old/ref log-probs nearby."""
  n, t = B * G, P + R
  k1, k2, k3, k4 = jax.random.split(rng, 4)
  tokens = jax.random.randint(k1, (n, t), 0, MODEL.vocab_size)
  lens = jax.random.randint(k2, (n,), 1, R + 1)
  pos = jnp.arange(t)[None, :]
  mask = ((pos >= P) & (pos < P + lens[:, None])).astype(jnp.int32)
  logp, _ = token_logprobs_from_logits(models.apply(MODEL, params, tokens), tokens)
  old = (logp + 0.3 * jax.random.normal(k3, logp.shape)) * mask
  ref = (logp + 0.3 * jax.random.normal(k4, logp.shape)) * mask
  rewards = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # group 2 has no variance
  return tokens, mask, old, ref, rewards


def _reference_loss(rl, params, critic, batch):
  """The algorithm's loss from full [N, T, V] logits: no chunks, no remat, one batch."""
  logits = models.apply(MODEL, params, batch["tokens"])
  logp, entropy = token_logprobs_from_logits(logits, batch["tokens"], rl.temperature)
  inputs = LossInputs(logp, entropy, batch["old_logp"], batch["adv"], batch["mask"],
                      batch.get("ref_logp"))
  loss, _ = rl.entry.loss(rl.algo, inputs, losses.totals_of(batch["mask"]))
  if critic is not None:
    h = hidden_states(MODEL, params, batch["tokens"])
    values = critic_lib.critic_values(rl.algo.critic, MODEL, critic, h, batch["tokens"])
    v_loss, _ = losses.value_loss(values, batch["old_values"], batch["returns"], batch["mask"],
                                  value_clip=rl.algo.value_clip)
    loss = loss + rl.algo.vf_coef * v_loss
  return loss


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_one_step_matches_reference_and_lowers_loss(name):
  rl = _rl(name)
  params = models.init_params(MODEL, jax.random.key(0))
  optimizer = optax.adam(1e-3)
  critic_opt = critic = None
  if rl.uses_critic:
    critic_opt = optax.adam(1e-3)
    critic = critic_lib.init_critic(rl.algo.critic, MODEL, params)
    critic["head"]["w"] = 0.1 * jax.random.normal(jax.random.key(5), (MODEL.embed_dim,))
  tokens, mask, old, ref, rewards = _rollout(params, jax.random.key(1))
  values = jax.jit(make_value_fn(MODEL, rl))(params, critic, tokens) if critic else None
  batch = rollout_batch(rl, tokens, mask, old, rewards, ref_logp_NxT=ref, values_NxT=values)
  if rl.algorithm == "dapo":  # dynamic sampling drops the zero-variance group
    assert batch["mask"][G:].sum() == 0 and batch["mask"][:G].sum() == mask[:G].sum()
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(2), critic=critic,
                     critic_opt_state=critic_opt.init(critic) if critic else None)
  new, metrics = jax.jit(make_rl_train_step(MODEL, rl, optimizer, critic_opt))(state, batch)

  reference = jax.jit(lambda p, c: _reference_loss(rl, p, c, batch))
  ref_loss, (g_params, g_critic) = jax.jit(jax.value_and_grad(reference, argnums=(0, 1)))(
      params, critic)
  np.testing.assert_allclose(metrics["loss"], ref_loss, rtol=2e-4, atol=1e-6)
  updates, _ = optimizer.update(g_params, state.opt_state, params)
  want = optax.apply_updates(params, updates)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-6),
               new.params, want)
  if critic is not None:
    c_updates, _ = critic_opt.update(g_critic, state.critic_opt_state, critic)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-6),
                 new.critic, optax.apply_updates(critic, c_updates))
  assert int(new.step) == 1
  after = reference(new.params, new.critic)
  assert after < ref_loss, (float(after), float(ref_loss))


def test_ppo_learns_a_trivially_learnable_reward():
  """Reward: the fraction of response tokens below 10 (about 1/6 at init)."""
  rl = _rl("ppo", algo=dict(critic="head"), grad_accum=1, remat="none")
  params = models.init_params(MODEL, jax.random.key(0))
  optimizer, critic_opt = optax.adam(3e-3), optax.adam(3e-3)
  critic = critic_lib.init_critic("head", MODEL, params)
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(2), critic=critic, critic_opt_state=critic_opt.init(critic))
  step = jax.jit(make_rl_train_step(MODEL, rl, optimizer, critic_opt))
  value_fn = jax.jit(make_value_fn(MODEL, rl))
  prompts = np.tile(np.array([[11, 12, 13]], np.int32), (B * G, 1))
  sample = lambda p, k: generate(p, prompts, np.full((B * G,), P, np.int32), k,
                                 model_config=MODEL, config=SamplingConfig(R), eos_id=60,
                                 pad_id=0)
  means = []
  for it in range(25):
    out = sample(state.params, jax.random.key(100 + it))
    mask = np.asarray(out.mask_BxT)
    rewards = ((np.asarray(out.tokens_BxT) < 10) * mask).sum(1) / np.maximum(mask.sum(1), 1)
    means.append(rewards.mean())
    values = value_fn(state.params, state.critic, out.tokens_BxT)
    batch = rollout_batch(rl, out.tokens_BxT, out.mask_BxT, out.logp_BxT, rewards,
                          values_NxT=values)
    state, metrics = step(state, batch)
  assert np.mean(means[-5:]) > np.mean(means[:5]) + 0.3, means
