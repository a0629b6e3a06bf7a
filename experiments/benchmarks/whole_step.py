r"""One whole GRPO step (rollout, reward, reference, update) of ours on a synthetic workload.

  PYTHONPATH=. python experiments/benchmarks/whole_step.py --spec=SPEC.json --out=OUT.json

What grpo_step.py --baselines runs on our side, pinned to the core the
baselines (trl_step.py, tunix_step.py) use, single-threaded. The spec
(written by `synthetic.workload_spec`) holds the architecture, random prompt ids,
P prompts x G, prompt and response lengths, beta, learning rate and steps.
No EOS: every response is `response` tokens long on every side, and the
reward is the fraction of even token ids in the response (the same
function on every side), so all systems do the same work. Ours runs with
`rl.shared_prefix` (each group's prompt through the update's and the
reference's layers once, as the trainer does with it on) unless the spec
says `"shared_prefix": false`, and computes in the spec's `compute_dtype`
(`rl.compute_dtype`: "float32", or "bfloat16" over f32 weights). The
update's layers are unrolled (`rl.unroll_layers` = the model's layers: the
setting for a small model on CPU), and its log-prob chunks keep their
logits for the backward instead of recomputing them (`rl.logprob_remat`
False, unless the spec says true: 4096-entry vocabularies over 64
response tokens fit easily).
"""

import functools
import os
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.rl import config as rl_config  # noqa: E402
from rl_post.rl.train_step import (make_ref_logprobs, make_rl_train_step, rollout_batch,  # noqa: E402
                                   shared_prefix_len)
from rl_post.sampling.sampler import SamplingConfig, generate  # noqa: E402
from rl_post.training import host_memory, precision  # noqa: E402
from rl_post.training.optimizer import OptimizerConfig, make_optimizer  # noqa: E402

from rl_post.training.state import TrainState  # noqa: E402

from experiments.benchmarks import side_io  # noqa: E402
from experiments.benchmarks.synthetic import even_fraction_N  # noqa: E402

def run(spec: dict) -> dict:
  p, g, plen, r = spec["prompts"], spec["group"], spec["prompt_len"], spec["response"]
  rl = rl_config.load(dict(batch_size=p, num_generations=g, max_prompt_len=plen,
                           max_new_tokens=r, logprob_chunk=plen,
                           shared_prefix=spec.get("shared_prefix", True),
                           logprob_remat=spec.get("logprob_remat", False),
                           compute_dtype=spec.get("compute_dtype", ""),
                           unroll_layers=spec["arch"]["num_layers"],
                           grpo=dict(kl_coef=spec["beta"], aggregation="token_mean")))
  weights_config = models.ModelConfig(**spec["arch"], attention_impl="xla")
  config = precision.compute_config(weights_config, rl.compute_dtype)  # as RLComponents
  optimizer = make_optimizer(OptimizerConfig(learning_rate=spec["learning_rate"],
                                             schedule="constant", b2=0.999))
  params = models.init_params(weights_config, jax.random.key(spec["seed"]))
  ref_params = jax.tree.map(jnp.copy, params) if rl.needs_reference else None
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(1))

  @functools.cache  # one compile per shared prefix length, as RLComponents.step_fn_for
  def fns_for(prefix_len):
    return (jax.jit(make_rl_train_step(config, rl, optimizer, prefix_len=prefix_len),
                    donate_argnums=0),
            jax.jit(make_ref_logprobs(config, rl, prefix_len=prefix_len)))
  prompts = jnp.asarray(np.repeat(np.asarray(spec["prompt_ids"], np.int32), g, axis=0))
  lens = jnp.full((p * g,), plen, jnp.int32)
  sampling = SamplingConfig(max_new_tokens=r, length_buckets=(plen,))
  wall, cpu, rollout_s, tokens, rewards = [], [], [], [], []
  for i in range(spec["steps"]):
    start, start_cpu = time.perf_counter(), time.process_time()
    rollout = generate(state.params, prompts, lens, jax.random.key(100 + i), model_config=config,
                       config=sampling, eos_id=None, pad_id=0, group_size=g)
    host = jax.device_get(rollout)
    rollout_s.append(time.perf_counter() - start)
    tokens.append(int(host.response_lens_B.sum()))
    reward_N = even_fraction_N(host.tokens_BxT[:, plen:], host.loss_mask_BxT[:, plen:])
    step_fn, ref_fn = fns_for(shared_prefix_len(rl, host.tokens_BxT))
    ref = (np.asarray(ref_fn(ref_params, rollout.tokens_BxT, rollout.loss_mask_BxT))
           if ref_params is not None else None)
    batch = rollout_batch(rl, host.tokens_BxT, host.loss_mask_BxT, host.logp_BxT, reward_N,
                          ref_logp_NxT=ref)
    state, metrics = step_fn(state, batch)
    jax.block_until_ready(metrics)
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
    rewards.append(float(reward_N.mean()))
  return dict(system="rl_post (JAX)", shared_prefix=rl.shared_prefix,
              logprob_remat=rl.logprob_remat,
              compute_dtype=config.dtype, step_wall_s=wall, step_cpu_s=cpu,
              rollout_s=rollout_s, rollout_tokens=tokens, reward_mean=rewards,
              versions={"jax": jax.__version__})


def main(argv=None):
  spec, out = side_io.read_spec(__doc__.splitlines()[0], argv)
  malloc = host_memory.apply_policy()  # as every rl_post entry point does
  hits = []  # programs loaded from a persistent compilation cache (step_baselines --cold_warm)
  jax.monitoring.register_event_listener(
      lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
  result = dict(run(spec), host_malloc=malloc, cache_hits=len(hits))
  side_io.write_result(out, result)


if __name__ == "__main__":
  main()
