"""Single-turn rollouts over the task mixture: the RL trainer's default source.

One round (N = B tasks x G generations):
  mixture.sample(it, B, round=rnd)   -> B tasks, each repeated G times
  encode_prompts                     -> prompts_NxP, lengths (each process its rows)
  sampler.generate(params, key)      -> tokens/logp/mask [N, T]        (jitted, sharded;
                                        on the sampler's mesh with rl.sampler_devices)
  reward pool (worker processes)     -> rewards [N], scored while the reference
                                        log-probs are dispatched
`observe` feeds every scored row to the mixture's curriculum; `evaluate`
scores the mixture's held-out set, greedy and sampled at the training
temperature. The reward pool starts with `start()` and is one per host.
"""

from rl_post.data import batching, domain_stats
from rl_post.eval.completion import eval_metrics, evaluate
from rl_post.parallel import process_data
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.process_split import ProcessSplitPool
from rl_post.rl import shape_buckets
from rl_post.rl.rollout_source import Round, RolloutSource
from rl_post.rl.train_step import shared_prefix_len
from rl_post.sampling.sampler import generate


class SingleTurnSource(RolloutSource):
  """B mixture tasks x G sampled completions per round, scored by the reward pool;
  generated on the sampler's mesh when the run has one (`rl.sampler_devices`)."""
  runs_on_sampler_mesh = True

  def __init__(self, components, config):
    del config  # every setting it reads is in the parsed components
    self.c = components
    self.pool = None

  @property
  def shapes(self):
    c = self.c
    return shape_buckets.plan(c.rl, c.sampling.length_buckets, c.trims_width)

  def start(self):
    c = self.c
    self.pool = ProcessSplitPool(RewardPool(c.rewards, c.tasks.domain_options))  # per host

  def launch(self, params, ref_params, *, it: int, rnd: int, key, timer) -> Round:
    c = self.c
    rl, tok, sampler = c.rl, c.ctx.tokenizer, c.sampler_mesh
    with timer("rollout"):
      tasks = c.mixture.sample(it, rl.batch_size, round=rnd)
      tasks_N = [t for t in tasks for _ in range(rl.num_generations)]
      prompts, lens = c.build_rows(  # multi-host: each process encodes only its rows
          lambda ts: batching.encode_prompts(tok, ts, rl.max_prompt_len), tasks_N)
      # rl.sampler_devices: generation on the sampler's mesh, the params handed over
      params = sampler.place(params)
      with sampler.running():
        # rl.rollout_precision: the sampler may read a low-precision copy of the masters
        rollout = generate(c.rollout_copy(params), prompts, lens, sampler.key(key),
                           model_config=c.rollout_config, config=c.sampling,
                           eos_id=tok.eos_id, pad_id=tok.pad_id, group_size=rl.num_generations)
      host = process_data.fetch(rollout)
    with timer("reward"):
      pending = self.pool.submit(tasks_N, batching.decode_responses(tok, host.tokens_BxT,
                                                                    host.mask_BxT))
      ref_fn = c.ref_fn_for(shared_prefix_len(rl, host.tokens_BxT))
      tokens, loss_mask = sampler.back((rollout.tokens_BxT, rollout.loss_mask_BxT))
      ref_logp = None if ref_params is None else ref_fn(ref_params, tokens, loss_mask)
      trainer_logp = None
      if rl.recomputes_logp:  # the masters' log-probs of the sampled tokens (rl/off_policy.py)
        with sampler.running():
          trainer_logp = ref_fn(params, rollout.tokens_BxT, rollout.loss_mask_BxT)
        trainer_logp = sampler.back(trainer_logp)
    return Round(tasks_N=tasks_N, host=host, pending=pending, ref_logp=ref_logp,
                 tokens=tokens, trainer_logp=trainer_logp)

  def observe(self, scored: dict) -> dict:
    """Feeds every scored row to the curriculum; per-domain/difficulty stats."""
    mixture, rewards = self.c.mixture, scored["rewards"]
    mixture.update(scored["tasks_N"], domain_stats.passed(rewards.verdicts))
    metrics = domain_stats.domain_metrics(scored["tasks_N"], rewards.verdicts, rewards.rewards_N,
                                          rewards.components, rewards.error_kinds)
    metrics.update(mixture.curriculum_metrics())
    return metrics

  def evaluate(self, params, *, step: int, key) -> dict:
    """Held-out completion rate, greedy (`eval/`) and sampled at the training
    temperature (`eval_sampled/`); {} without a held-out set."""
    del step
    c = self.c
    if not c.mixture.heldout:
      return {}
    metrics = {}
    for prefix, sampling in (("eval", c.eval_sampling), ("eval_sampled", c.sampling)):
      result = evaluate(c.model_config, params, c.ctx.tokenizer, c.mixture.heldout,
                        sampling=sampling, max_prompt_len=c.rl.max_prompt_len,
                        batch_size=c.rl.rollouts_per_step, rng=key, shard=c.shard,
                        reward_pool=self.pool)
      metrics.update(eval_metrics(result, prefix))
    return metrics

  def close(self):
    if self.pool is not None:
      self.pool.close()
      self.pool = None
