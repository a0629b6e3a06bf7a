"""The RL trainer loop: tasks -> rollouts -> rewards -> advantages -> update.

One iteration, as data (N = B prompts x G generations):
  mixture.sample(step)          -> B tasks
  sampler.generate              -> tokens/logp/mask [N, T]     (jitted, sharded)
  reward pool (worker processes) -> rewards [N]                (overlaps ref logp)
  rl.algorithm's estimator      -> adv [N, T]   (registry entry; critic values for PPO)
  train_step x epochs x minibatches                            (jitted, donated)
Checkpoints hold the TrainState and the iteration count; task batches and
sampling keys are functions of (seed, iteration), so a resumed run repeats
exactly what an uninterrupted one would have done.
"""

import os
import time

import jax
import numpy as np
from absl import logging

from rl_post.checkpoint.manager import CheckpointManager
from rl_post.checkpoint.params import load_model_config, load_params
from rl_post.config_sections import from_section
from rl_post.data import batching
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.eval.completion import eval_metrics, evaluate
from rl_post.metrics.timing import StepTimer
from rl_post.metrics.writers import MetricWriter
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardConfig
from rl_post.rl import critic as critic_lib
from rl_post.rl import config as rl_config
from rl_post.rl.config import RLConfig
from rl_post.rl.train_step import (batch_ndims, make_ref_logprobs, make_rl_train_step,
                                   make_value_fn, rollout_batch)
from rl_post.sampling.sampler import SamplingConfig, generate
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.run import RunContext, pretrained_params, setup_run
from rl_post.training.step import jit_train_step


def _initial_params(ctx: RunContext, rl: RLConfig):
  """Params to start from: exported SFT params, `config.pretrained`, or None (fresh init)."""
  if not rl.init_from:
    return pretrained_params(ctx)
  stored = load_model_config(rl.init_from)
  if stored != ctx.model_config:
    diff = {k: (v, getattr(ctx.model_config, k)) for k, v in stored.to_dict().items()
            if getattr(ctx.model_config, k) != v}
    raise ValueError(f"rl.init_from={rl.init_from!r} holds a model that differs from "
                     f"config.model in {diff} (stored, configured)")
  return load_params(rl.init_from,
                     state_lib.abstract_sharded_params(ctx.model_config, ctx.mesh, ctx.rules))


def _rollout_metrics(tasks_N, reward_batch, rollout, rl: RLConfig) -> dict:
  rewards = reward_batch.rewards_N
  groups = rewards.reshape(-1, rl.num_generations)
  metrics = {
      "reward/mean": rewards.mean(), "reward/std": rewards.std(),
      "reward/errors": reward_batch.errors,
      "reward/timeout_frac": float(np.mean([v.error == "timeout" for v in reward_batch.verdicts])),
      "groups/zero_std_frac": float((groups.std(axis=1) == 0).mean()),
      "response_len/mean": rollout.response_lens_B.mean(),
      "response_len/max": rollout.response_lens_B.max(),
      "response/truncated_frac": 1.0 - rollout.finished_B.mean(),
  }
  domains = np.array([t.domain for t in tasks_N])
  for domain in sorted(set(domains.tolist())):
    sel = domains == domain
    metrics[f"reward/{domain}/mean"] = rewards[sel].mean()
    metrics[f"pass_rate/{domain}"] = reward_batch.components["outcome"][sel].mean()
    metrics[f"format_rate/{domain}"] = reward_batch.components["format"][sel].mean()
  return metrics


class _Components:
  """Everything the loop needs, built once from the config."""

  def __init__(self, config, workdir):
    self.ctx = ctx = setup_run(config, workdir)
    self.rl = rl = rl_config.load(config.get("rl"))
    self.tasks = from_section(TaskConfig, config.get("tasks"), "tasks")
    self.opt = from_section(OptimizerConfig, config.get("optimizer"), "optimizer")
    self.rewards = from_section(RewardConfig, config.get("rewards"), "rewards")
    divisor = ctx.batch_divisor()
    minibatch = rl.rollouts_per_step // rl.num_minibatches
    if minibatch % divisor:
      raise ValueError(f"rl: minibatch size {minibatch} (batch_size * num_generations / "
                       f"num_minibatches) must be a multiple of the mesh batch axes ({divisor})")
    self.sampling = SamplingConfig(max_new_tokens=rl.max_new_tokens, temperature=rl.temperature)
    self.eval_sampling = SamplingConfig(max_new_tokens=rl.max_new_tokens, greedy=True)
    self.mixture = TaskMixture(self.tasks, int(config.seed))
    self.optimizer = make_optimizer(self.opt)
    mesh, rules = ctx.mesh, ctx.rules
    self.state_shardings = state_lib.state_shardings(ctx.model_config, self.optimizer, mesh,
                                                     rules)
    self.critic_optimizer = None
    cp_mesh = mesh_lib.context_mesh(mesh)
    if rl.uses_critic:
      self.critic_optimizer = critic_lib.make_critic_optimizer(self.opt,
                                                               rl.algo.critic_learning_rate)
      self.state_shardings = critic_lib.with_critic_shardings(
          self.state_shardings, rl.algo.critic, ctx.model_config, self.critic_optimizer, mesh,
          rules)
      self.value_fn = jax.jit(make_value_fn(ctx.model_config, rl, cp_mesh))
    self.batch_sharding = {k: sharding.batch_sharding(mesh, rules, nd)
                           for k, nd in batch_ndims(rl).items()}
    self.step_fn = jit_train_step(
        make_rl_train_step(ctx.model_config, rl, self.optimizer, self.critic_optimizer,
                           cp_mesh),
        self.state_shardings, self.batch_sharding)
    self.ref_fn = jax.jit(make_ref_logprobs(ctx.model_config, rl, cp_mesh))

  def abstract_state(self):
    """The checkpoint restore target (with the critic when the algorithm has one)."""
    ctx = self.ctx
    abstract = state_lib.abstract_state(ctx.model_config, self.optimizer, ctx.mesh, ctx.rules)
    if self.critic_optimizer is None:
      return abstract
    return critic_lib.with_abstract_critic(abstract, self.state_shardings, self.rl.algo.critic,
                                           ctx.model_config, self.critic_optimizer)

  def shard(self, tree):
    return sharding.shard_batch(tree, self.ctx.mesh, self.ctx.rules)


def _evaluate_heldout(c: _Components, params, step: int) -> dict:
  """Held-out completion rate, greedy and sampled at the training temperature."""
  if not c.mixture.heldout:
    return {}
  metrics = {}
  for prefix, sampling in (("eval", c.eval_sampling), ("eval_sampled", c.sampling)):
    result = evaluate(c.ctx.model_config, params, c.ctx.tokenizer, c.mixture.heldout,
                      sampling=sampling, max_prompt_len=c.rl.max_prompt_len,
                      batch_size=c.rl.rollouts_per_step,
                      rng=jax.random.fold_in(c.ctx.key("eval"), step), shard=c.shard,
                      domain_options=c.tasks.domain_options)
    metrics.update(eval_metrics(result, prefix))
  return metrics


def _minibatches(batch: dict, rl: RLConfig, key) -> list[dict]:
  """epochs x minibatches slices of the rollout batch, shuffled per epoch."""
  n = rl.rollouts_per_step
  size = n // rl.num_minibatches
  out = []
  for epoch in range(rl.num_epochs):
    order = np.asarray(jax.random.permutation(jax.random.fold_in(key, epoch), n))
    for i in range(rl.num_minibatches):
      idx = order[i * size:(i + 1) * size]
      out.append({k: v[idx] for k, v in batch.items()})
  return out


def train(config, workdir: str) -> dict:
  """Runs (or resumes) `config.rl.algorithm`; returns the final metrics."""
  c = _Components(config, workdir)
  ctx, rl, tok = c.ctx, c.rl, c.ctx.tokenizer
  init_params = _initial_params(ctx, rl)
  state = state_lib.create_train_state(ctx.model_config, c.optimizer, ctx.mesh, ctx.rules,
                                       ctx.key("init"), params=init_params)
  if c.critic_optimizer is not None:
    state = critic_lib.attach_critic(state, rl.algo.critic, ctx.model_config,
                                     c.critic_optimizer, c.state_shardings)
  ref_params = None
  if rl.needs_reference:  # frozen copy of the starting policy, optionally in bf16
    ref_params = jax.jit(lambda p: jax.tree.map(lambda x: x.astype(rl.ref_dtype), p))(
        state.params)
  checkpoints = CheckpointManager(os.path.join(workdir, "checkpoints"), max_to_keep=3)
  start = 0
  if checkpoints.latest_step() is not None:
    state, extra = checkpoints.restore(c.abstract_state(), fallback=True)
    start = int(extra["rl_step"])
    logging.info("resumed from iteration %d", start)
  writer = MetricWriter(workdir, truncate_after_step=start)
  pool = RewardPool(c.rewards, c.tasks.domain_options)
  timer = StepTimer()
  last_metrics = {}
  try:
    for it in range(start, rl.num_steps):
      step_start = time.perf_counter()
      with timer("rollout"):
        tasks = c.mixture.sample(it, rl.batch_size)
        tasks_N = [t for t in tasks for _ in range(rl.num_generations)]
        prompts, lens = batching.encode_prompts(tok, tasks_N, rl.max_prompt_len)
        prompts, lens = c.shard((prompts, lens))
        rollout = generate(state.params, prompts, lens, jax.random.fold_in(ctx.key("rollout"), it),
                           model_config=ctx.model_config, config=c.sampling,
                           eos_id=tok.eos_id, pad_id=tok.pad_id)
        host = jax.device_get(rollout)
      with timer("reward"):
        pending = pool.submit(tasks_N, batching.decode_responses(tok, host.tokens_BxT,
                                                                 host.mask_BxT))
        ref_logp = None if ref_params is None else c.ref_fn(ref_params, rollout.tokens_BxT)
        values = (c.value_fn(state.params, state.critic, rollout.tokens_BxT)
                  if rl.uses_critic else None)
        rewards = pending.result()
      batch = rollout_batch(rl, host.tokens_BxT, host.mask_BxT, host.logp_BxT,
                            rewards.rewards_N, ref_logp_NxT=ref_logp, values_NxT=values)
      with timer("train"):
        step_metrics = []
        for mb in _minibatches(batch, rl, jax.random.fold_in(ctx.key("shuffle"), it)):
          state, m = c.step_fn(state, jax.device_put(mb, c.batch_sharding))
          step_metrics.append(m)
        step_metrics = jax.device_get(step_metrics)
      metrics = {k: float(np.mean([m[k] for m in step_metrics])) for k in step_metrics[0]}
      metrics.update(_rollout_metrics(tasks_N, rewards, host, rl))
      metrics.update(timer.metrics())
      timer.reset()
      elapsed = time.perf_counter() - step_start
      metrics["time/step_s"] = elapsed
      metrics["throughput/rollout_tokens_per_s"] = (
          float(host.response_lens_B.sum()) / max(metrics["time/rollout_s"], 1e-9))
      done = it + 1
      if rl.eval_every and done % rl.eval_every == 0 or done == rl.num_steps:
        with timer("eval"):
          metrics.update(_evaluate_heldout(c, state.params, done))
      writer.write(done, metrics)
      logging.info("rl step %d: reward %.3f pass %.3f kl %s len %.1f (%.2fs)", done,
                   metrics["reward/mean"], np.mean([v for k, v in metrics.items()
                                                   if k.startswith("pass_rate/")]),
                   f"{metrics['kl']:.4f}" if "kl" in metrics else "-",
                   metrics["response_len/mean"], elapsed)
      if done % rl.checkpoint_every == 0 or done == rl.num_steps:
        checkpoints.save(done, state, extra={"rl_step": done}, force=True)
      last_metrics = metrics
  finally:
    checkpoints.close()
    writer.close()
    pool.close()
  return {"state": state, "metrics": last_metrics, "context": ctx}
