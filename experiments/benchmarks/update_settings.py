r"""The update and the reference forward by rl.compute_dtype, rl.unroll_layers, rl.logprob_remat.

  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/update_settings.py
  PYTHONPATH=. python experiments/benchmarks/update_settings.py --smoke --out=/tmp/u.json

Workload (b) of the whole-step benchmark (4 layers, d=256, vocab 4096,
4 prompts x G=4, prompt 32, response 64, beta 0.04, rl.shared_prefix on),
one rollout sampled once: each setting compiles the trainer's update step
(`make_rl_train_step`) and reference forward (`make_ref_logprobs`), then the
settings are called in turns (`--rounds` times each, so drift of the
machine hits all of them alike) and the median seconds are reported.
Settings: compute dtype float32 | bfloat16 (over f32 weights) and
unroll_layers 1 (a loop over layers) | the model's layers (straight-line
code); with the layers unrolled, also rl.logprob_remat True (each log-prob
chunk's logits recomputed in the backward) | False (kept from the
forward). The reference is timed twice per round: given the loss mask, as the
trainer calls it (prompt-only log-prob chunks skipped), and without it
(every position); it does not read unroll_layers (its layers stay a loop),
so its unroll and logprob_remat rows time the same program. The host memory policy is
applied, as in every entry point. Writes a table and
experiments/benchmarks/results/update_settings.json.
"""

import argparse
import json
import os
import statistics
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

from experiments.benchmarks.step_baselines import ARCH, BETA, WORK  # noqa: E402
from experiments.benchmarks.synthetic import even_fraction_N  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "update_settings.json")


def compiled_settings(name: str):
  """{(dtype, unroll, logprob_remat): (update, reference, state, batch, ref_params, tokens,
  mask)}."""
  arch, work = ARCH[name], WORK[name]
  p, g = work["prompts"], work["group"]
  plen, resp = (8, 8) if name == "smoke" else (32, 64)
  weights_config = models.ModelConfig(**arch, attention_impl="xla")
  params = models.init_params(weights_config, jax.random.key(0))
  prompts = np.repeat(np.random.default_rng(0).integers(4, arch["vocab_size"], (p, plen)), g, 0)
  rollout = generate(params, jnp.asarray(prompts, jnp.int32), jnp.full((p * g,), plen, jnp.int32),
                     jax.random.key(1), model_config=weights_config,
                     config=SamplingConfig(max_new_tokens=resp, length_buckets=(plen,)),
                     eos_id=None, pad_id=0, group_size=g)
  host = jax.device_get(rollout)
  reward = even_fraction_N(host.tokens_BxT[:, plen:], host.loss_mask_BxT[:, plen:])
  optimizer = make_optimizer(OptimizerConfig(learning_rate=1e-5, schedule="constant", b2=0.999))
  out = {}
  unrolled = arch["num_layers"]
  # (unroll, logprob_remat): one layer at a time, then straight-line both ways (one pair
  # fewer for a one-layer model)
  layer_settings = dict.fromkeys([(1, True), (unrolled, True), (unrolled, False)])
  keys = [(dtype, *setting) for dtype in ("float32", "bfloat16") for setting in layer_settings]
  for dtype, unroll, remat in keys:
    rl = rl_config.load(dict(batch_size=p, num_generations=g, max_prompt_len=plen,
                             max_new_tokens=resp, logprob_chunk=plen, shared_prefix=True,
                             compute_dtype=dtype, unroll_layers=unroll, logprob_remat=remat,
                             grpo=dict(kl_coef=BETA, aggregation="token_mean")))
    config = precision.compute_config(weights_config, rl.compute_dtype)
    prefix = shared_prefix_len(rl, host.tokens_BxT)
    reference = jax.jit(make_ref_logprobs(config, rl, prefix_len=prefix))
    ref = np.asarray(reference(params, rollout.tokens_BxT, rollout.loss_mask_BxT))
    batch = rollout_batch(rl, host.tokens_BxT, host.loss_mask_BxT, host.logp_BxT, reward,
                          ref_logp_NxT=ref)
    state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                       rng=jax.random.key(2))
    update = jax.jit(make_rl_train_step(config, rl, optimizer, prefix_len=prefix))
    jax.block_until_ready(update(state, batch))
    jax.block_until_ready(reference(params, rollout.tokens_BxT))  # compiles the unmasked call
    out[(dtype, unroll, remat)] = (update, reference, state, batch, params,
                                   rollout.tokens_BxT, rollout.loss_mask_BxT)
  return out


def measure(settings: dict, rounds: int) -> list[dict]:
  times = {key: {"update": [], "reference": [], "reference_all": []} for key in settings}
  for _ in range(rounds):
    for key, (update, reference, state, batch, params, tokens, mask) in settings.items():
      calls = {"update": lambda: update(state, batch),
               "reference": lambda: reference(params, tokens, mask),
               "reference_all": lambda: reference(params, tokens)}
      for name, call in calls.items():
        start = time.perf_counter()
        jax.block_until_ready(call())
        times[key][name].append(time.perf_counter() - start)
  base = statistics.median(times[("float32", 1, True)]["update"])
  return [dict(compute_dtype=dtype, unroll_layers=unroll, logprob_remat=remat,
               update_s=statistics.median(t["update"]),
               reference_s=statistics.median(t["reference"]),
               reference_every_position_s=statistics.median(t["reference_all"]),
               update_vs_f32_loop=statistics.median(t["update"]) / base)
          for (dtype, unroll, remat), t in times.items()]


def table(rows: list[dict]) -> str:
  head = (f"{'compute':<10}{'unroll':>7}{'logprob remat':>14}{'update s':>10}{'reference s':>13}"
          f"{'ref. all positions s':>22}{'update / f32 loop':>19}")
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(f"{r['compute_dtype']:<10}{r['unroll_layers']:>7}"
                 f"{'yes' if r['logprob_remat'] else 'no':>14}{r['update_s']:>10.4f}"
                 f"{r['reference_s']:>13.4f}{r['reference_every_position_s']:>22.4f}"
                 f"{r['update_vs_f32_loop']:>19.3f}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true", help="tiny model, for tests")
  parser.add_argument("--rounds", type=int, default=15)
  parser.add_argument("--out", default=RESULTS)
  args = parser.parse_args(argv)
  malloc = host_memory.apply_policy()
  rows = measure(compiled_settings("smoke" if args.smoke else "b"), args.rounds)
  print(f"update and reference forward, median of {args.rounds} calls in turns "
        f"(load avg {os.getloadavg()[0]:.1f})")
  print(table(rows))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump({"jax": jax.__version__, "rounds": args.rounds, "host_malloc": malloc,
               "rows": rows}, f, indent=1)
  return rows


if __name__ == "__main__":
  main()
