"""The RL update step: compiled memory, seconds per update, GFLOP/s against matmul peak.

  python experiments/benchmarks/grpo_step.py              # SmolLM2-135M memory + timed small model
  python experiments/benchmarks/grpo_step.py --smoke --out=/tmp/grpo_step.json   # tiny sizes
  python experiments/benchmarks/grpo_step.py --whole_step_only   # whole step: ours, TRL, Tunix
  python experiments/benchmarks/grpo_step.py --whole_step_only --cold_warm  # + compile cache

Whole GRPO step (rollout + reward + reference + update) of ours, TRL's
GRPOTrainer and Tunix's GRPOLearner on sampling.py's workloads (a) and (b),
each in its own process pinned to one core (step_baselines.py; the
baselines' environments come from setup_baselines.sh). `--precisions=f32,bf16`
(default) also runs both workloads in mixed precision ("a-bf16", "b-bf16":
bf16 compute over f32 weights, ours with rl.compute_dtype and TRL with
bf16=True; Tunix's step has no such setting). Default: all three,
none with --smoke. With ours, the same run times the step's matmul floor
(step_floor.py: its GEMMs alone, with XLA and, in TRL's env, with torch),
and the goal table says whether half of each baseline's step lies above it.

Variants of the same GRPO update (loss, gradient, AdamW step):
  baseline   main's path: full [N, T, V] f32 logits, log-softmax and entropy
             at once, no remat, no accumulation (`models.apply` +
             `token_logprobs_from_logits`).
  chunked    rl.train_step: hidden states, then log-softmax in chunks of
             `logprob_chunk` positions under jax.checkpoint.
  chunked+remat+accum  the above with the config's remat and grad_accum.
Memory is XLA's compiled memory analysis of the jitted, donated step
(arguments + outputs + temporaries - aliased), measured from abstract shapes,
so the SmolLM2-135M rows need no weights. Seconds per update are timed on
the small workload (issue 15's 4-layer d=256 vocab-4096 model); GFLOP/s
count the baseline program's FLOPs (XLA cost analysis; the same maths in
every variant, and XLA counts a loop body once, so the chunked programs'
own counts are too low) against the best of a few matmuls of the model's
shapes timed in the same run.
"""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402
from rl_post.rl import config as rl_config  # noqa: E402
from rl_post.rl import losses  # noqa: E402
from rl_post.models.logprobs import token_logprobs_from_logits  # noqa: E402
from rl_post.rl.train_step import make_rl_train_step  # noqa: E402
from rl_post.training.state import TrainState  # noqa: E402
from rl_post.training.step import make_train_step  # noqa: E402
from experiments.benchmarks import step_baselines  # noqa: E402
from experiments.benchmarks import update_speed  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "grpo_step.json")
WHOLE_RESULTS = os.path.join(os.path.dirname(RESULTS), "grpo_step_whole.json")


@dataclasses.dataclass(frozen=True)
class Workload:
  name: str
  model: models.ModelConfig
  rl: rl_config.RLConfig
  timed: bool


def baseline_step(model_config, rl, optimizer):
  """main's GRPO update: full logits, one batch."""

  def loss_fn(params, batch, rng):
    del rng
    logits = models.apply(model_config, params, batch["tokens"])
    logp, entropy = token_logprobs_from_logits(logits, batch["tokens"], rl.temperature)
    loss, metrics = losses.policy_loss(logp, batch["old_logp"], batch["adv"], batch["mask"],
                                       entropy_NxT=entropy, clip_low=rl.algo.clip_low,
                                       clip_high=rl.algo.clip_high,
                                       aggregation=rl.algo.aggregation)
    return loss, metrics

  return make_train_step(loss_fn, optimizer)


def variants(w: Workload):
  fast = dataclasses.replace(w.rl, remat="none", grad_accum=1)
  out = {"baseline": (baseline_step, fast), "chunked": (make_rl_train_step, fast)}
  if (w.rl.remat, w.rl.grad_accum) != ("none", 1):
    out[f"chunked+remat={w.rl.remat}+accum={w.rl.grad_accum}"] = (make_rl_train_step, w.rl)
  return out


def abstract_inputs(w: Workload, optimizer):
  n, t = w.rl.minibatch_size, w.rl.max_prompt_len + w.rl.max_new_tokens
  params = models.abstract_params(w.model)
  state = jax.eval_shape(lambda p: TrainState(step=jnp.int32(0), params=p,
                                              opt_state=optimizer.init(p),
                                              rng=jax.random.key(0)), params)
  f32 = lambda shape: jax.ShapeDtypeStruct(shape, jnp.float32)
  batch = dict(tokens=jax.ShapeDtypeStruct((n, t), jnp.int32),
               mask=jax.ShapeDtypeStruct((n, t), jnp.int32), old_logp=f32((n, t)),
               adv=f32((n, t)))
  return state, batch


def concrete_inputs(w: Workload, optimizer, seed=0):
  n, p, r = w.rl.minibatch_size, w.rl.max_prompt_len, w.rl.max_new_tokens
  params = models.init_params(w.model, jax.random.key(seed))
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(1))
  rng = np.random.default_rng(seed)
  mask = np.zeros((n, p + r), np.int32)
  mask[:, p:] = 1
  batch = dict(tokens=rng.integers(0, w.model.vocab_size, (n, p + r)).astype(np.int32),
               mask=mask, old_logp=np.log(rng.uniform(0.01, 1, (n, p + r))).astype(np.float32),
               adv=rng.normal(size=(n, p + r)).astype(np.float32) * mask)
  return state, batch


def memory_bytes(compiled) -> dict:
  m = compiled.memory_analysis()
  peak = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes)
  return {"peak_bytes": int(peak), "temp_bytes": int(m.temp_size_in_bytes),
          "argument_bytes": int(m.argument_size_in_bytes)}


def xla_flops(compiled) -> float:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", 0.0))


def matmul_peak_gflops(shapes, repeats: int) -> float:
  """Best GFLOP/s of f32 matmuls [m, k] x [k, n] (the machine's reference in this run)."""
  best = 0.0
  for m, k, n in shapes:
    a = jnp.ones((m, k), jnp.float32)
    b = jnp.ones((k, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    start = time.perf_counter()
    for _ in range(repeats):
      out = f(a, b)
    out.block_until_ready()
    best = max(best, 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9)
  return best


def run_workload(w: Workload, repeats: int, peak: float) -> list[dict]:
  optimizer = optax.adamw(1e-5)
  rows = []
  work_gflop = None
  for name, (make, rl) in variants(w).items():
    step = jax.jit(make(w.model, rl, optimizer), donate_argnums=0)
    start = time.perf_counter()
    compiled = step.lower(*abstract_inputs(w, optimizer)).compile()
    work_gflop = work_gflop or xla_flops(compiled) / 1e9  # the baseline comes first
    row = dict(workload=w.name, variant=name, compile_s=time.perf_counter() - start,
               gflop=work_gflop, **memory_bytes(compiled))
    if w.timed:
      state, batch = concrete_inputs(w, optimizer)
      state, metrics = compiled(state, batch)
      jax.block_until_ready(metrics)
      start = time.perf_counter()
      for _ in range(repeats):
        state, metrics = compiled(state, batch)
      jax.block_until_ready(metrics)
      row["s_per_update"] = (time.perf_counter() - start) / repeats
      row["gflops_per_s"] = row["gflop"] / row["s_per_update"]
      row["frac_of_matmul_peak"] = row["gflops_per_s"] / peak
    rows.append(row)
  return rows


def smollm2_workload() -> Workload:
  from configs import smollm2_135m_grpo
  from rl_post.models import gguf
  config = smollm2_135m_grpo.get_config()
  model, _ = gguf.config_from_gguf(gguf.open_reader(config.pretrained.path))
  model = dataclasses.replace(model, attention_impl="xla")
  return Workload("smollm2_135m_grpo", model, rl_config.load(config.rl), timed=False)


def small_workload(smoke: bool) -> Workload:
  if smoke:
    model = models.ModelConfig(vocab_size=2048, num_layers=2, embed_dim=32, num_heads=2,
                               num_kv_heads=1, head_dim=16, mlp_dim=64, attention_impl="xla")
    rl = rl_config.load(dict(batch_size=2, num_generations=2, max_prompt_len=8,
                             max_new_tokens=24, logprob_chunk=8, remat="full", grad_accum=2))
  else:
    model = models.ModelConfig(vocab_size=4096, num_layers=4, embed_dim=256, num_heads=4,
                               num_kv_heads=4, head_dim=64, mlp_dim=1024, attention_impl="xla")
    rl = rl_config.load(dict(batch_size=4, num_generations=4, max_prompt_len=32,
                             max_new_tokens=64, logprob_chunk=32, remat="full", grad_accum=2))
  return Workload("small_4x4" if not smoke else "smoke", model, rl, timed=True)


def table(rows) -> str:
  head = (f"{'workload':<18} {'variant':<30} {'peak MB':>9} {'temp MB':>9} {'GFLOP':>8} "
          f"{'compile s':>9} {'s/update':>9} {'GFLOP/s':>8} {'% peak':>7}")
  lines = [head, "-" * len(head)]
  for r in rows:
    timed = (f"{r['s_per_update']:>9.3f} {r['gflops_per_s']:>8.1f} "
             f"{100 * r['frac_of_matmul_peak']:>6.1f}%" if "s_per_update" in r else
             f"{'-':>9} {'-':>8} {'-':>7}")
    lines.append(f"{r['workload']:<18} {r['variant']:<30} {r['peak_bytes'] / 2**20:>9.1f} "
                 f"{r['temp_bytes'] / 2**20:>9.1f} {r['gflop']:>8.2f} {r['compile_s']:>9.1f} "
                 + timed)
  return "\n".join(lines)


def run_update_speed(args) -> list[dict]:
  """CPU seconds of the update on one pinned core, this tree vs `--before-ref` (full runs)."""
  if args.smoke or args.whole_step_only:  # update_speed.py has its own smoke test
    return []
  speed = update_speed.compare(args.before_ref, repeats=max(args.repeats, 5))
  print("update speed, one pinned core, CPU seconds (experiments/benchmarks/update_speed.py):")
  print(update_speed.table(speed))
  return speed


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true", help="tiny sizes, no SmolLM2")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=None, help=f"default {RESULTS} ({WHOLE_RESULTS} with "
                      "--whole_step_only)")
  parser.add_argument("--whole_step_only", action="store_true",
                      help="only the whole-step rows (no update variants, no SmolLM2)")
  parser.add_argument("--whole_step", default=None,
                      help="systems of the whole-step rows: ours,trl,tunix (default; '' with --smoke)")
  parser.add_argument("--whole_steps", type=int, default=6, help="steps per system (first apart)")
  parser.add_argument("--trl_python", default=None, help="default: <envs>/trl/bin/python")
  parser.add_argument("--tunix_python", default=None, help="default: <envs>/tunix/bin/python")
  parser.add_argument("--core", type=int, default=None, help="CPU of the whole-step rows")
  parser.add_argument("--precisions", default="f32,bf16",
                      help="whole-step precisions: f32 (all systems, floors) and bf16 (mixed "
                      "precision: ours with rl.compute_dtype=bfloat16, TRL with bf16=True)")
  parser.add_argument("--cold_warm", action="store_true",
                      help="whole step: ours twice more, with a new persistent compilation "
                      "cache (cold) and then the same one (warm), each a fresh process")
  parser.add_argument("--before-ref", default=update_speed.BEFORE_REF,
                      help="git ref the update-speed rows compare this tree with")
  args = parser.parse_args(argv)
  if not (args.smoke or args.whole_step_only):  # the update-speed rows archive --before-ref
    try:
      update_speed.check_ref(args.before_ref)
    except ValueError as e:
      parser.error(str(e))
  try:
    names = step_baselines.parse_systems(("" if args.smoke else "ours,trl,tunix")
                                         if args.whole_step is None else args.whole_step)
    precisions = step_baselines.parse_precisions(args.precisions)
  except ValueError as e:
    parser.error(str(e))
  systems = step_baselines.interpreters(  # a missing baseline env fails here, first
      names, {"trl": args.trl_python, "tunix": args.tunix_python})
  args.out = args.out or (WHOLE_RESULTS if args.whole_step_only else RESULTS)
  rows, peak = [], None
  if not args.whole_step_only:
    small = small_workload(args.smoke)
    tokens = small.rl.minibatch_size * (small.rl.max_prompt_len + small.rl.max_new_tokens)
    e, f, v = small.model.embed_dim, small.model.mlp_dim, small.model.vocab_size
    peak = matmul_peak_gflops([(tokens, e, f), (tokens, f, e), (tokens, e, v)], args.repeats)
    rows = run_workload(small, args.repeats, peak)
    if not args.smoke:
      rows += run_workload(smollm2_workload(), args.repeats, peak)
  whole, load, cpu = [], os.getloadavg(), host_cpu.describe()
  print(f"CPU: {host_cpu.one_line(cpu)}")
  if systems:
    core = max(os.sched_getaffinity(0)) if args.core is None else args.core
    whole = step_baselines.whole_step_rows(systems, args.smoke, args.whole_steps, core,
                                           tempfile.mkdtemp(prefix="grpo_step_whole_"),
                                           precisions, cold_warm=args.cold_warm)
  if rows:
    print(f"matmul peak (best of the model's shapes, f32): {peak:.1f} GFLOP/s")
    print(table(rows))
  if whole:
    print(f"\nwhole GRPO step, one core, beta {step_baselines.BETA}; load avg before "
          f"{load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print(step_baselines.table(whole))
    print("\ngoal: ours <= half of each baseline's s/step; the floors are the step's GEMMs alone "
          "(step_floor.py)")
    print(step_baselines.goals_table(step_baselines.goals(whole)))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  speed = run_update_speed(args)
  with open(args.out, "w") as fh:
    json.dump({"cpu": cpu, "matmul_peak_gflops": peak, "devices": str(jax.devices()), "rows": rows,
               "whole_step": whole, "whole_step_goals": step_baselines.goals(whole),
               "whole_step_load_avg": [load, os.getloadavg()],
               "update_speed": speed}, fh, indent=1)
  return rows


if __name__ == "__main__":
  try:
    main()
  except step_baselines.BaselineEnvMissing as e:
    print(f"grpo_step: {e}", file=sys.stderr)
    sys.exit(2)
