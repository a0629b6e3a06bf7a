r"""Rollout throughput: the rollout engine vs main's static sampler and HF generate.

  PYTHONPATH=. python experiments/benchmarks/sampling.py            # a, b, d
  PYTHONPATH=. python experiments/benchmarks/sampling.py --workloads a,b,c,d
  PYTHONPATH=. python experiments/benchmarks/sampling.py --smoke --out /tmp/s.json
  PYTHONPATH=. python experiments/benchmarks/sampling.py --workloads c --precisions bfloat16,int8

Everything runs in one process pinned to one CPU core (XLA and PyTorch
single-threaded), on the same architecture and random weights: the
Hugging Face model (LlamaForCausalLM) is built from our params and its
logits are checked against ours. Workloads (one GRPO rollout batch each):
  a: 2 layers, d=128, vocab 512, 2 prompts x G=8, prompt 32, response 64
  b: 4 layers, d=256, vocab 4096, 4 prompts x G=4, prompt 32, response 64
  c: SmolLM2-135M architecture (random weights), 8 prompts x G=4, response 64
  d: like b, 64 requests (4 rollout batches of 16) with response budgets
     drawn from 8..256, 16 slots: continuous batching (refill as soon as a
     slot frees; the draining batch halves as rows finish, and without
     that; and refilling once a quarter of the slots is free, the library
     default: fewer decode calls, and the first step of a call costs more
     than a step inside the loop) vs the static path (batches of 16, each
     as long as its longest row)
No EOS: every row samples its full budget (temperature 1, no truncation),
so all systems generate the same number of tokens. Times are CPU seconds
of the pinned single-threaded process (wall seconds are in the JSON too:
on a shared machine they include other jobs' time slices); tokens/s is
generated tokens per CPU second. Systems are timed in turns (repeat i of
each, then repeat i + 1; median of --repeats) so the VM's drift hits them
alike. Prefill MFU is the prefill's useful
FLOP/s over the f32 matmul peak measured here.
Workloads a-c also time "matmuls only (floor)" (and, with HF, the same in
PyTorch: "matmuls only, torch (floor)"): the same number of decode
steps doing nothing but the model's matmuls (decode_matmuls_fn), a floor
under any f32 decoder on this core; the JSON's `floors` says whether 3x HF
lies above it.
With --precisions, workloads a-c also time the engine on the low-precision
rollout copies the trainer hands the sampler (`rl.rollout_precision`,
rl_post/sampling/low_precision.py: "rl_post engine (bfloat16)", ...), made
from the same f32 params; HF stays in f32 (the JSON's `precision_vs_hf`).
Writes a table and experiments/benchmarks/results/sampling.json.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments.benchmarks import sampling_legacy  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402
from rl_post.models import hf as hf_lib  # noqa: E402
from rl_post.sampling import controls, engine, low_precision  # noqa: E402
from rl_post.sampling.continuous import generate_continuous  # noqa: E402
from rl_post.sampling.sampler import SamplingConfig, generate, row_seeds  # noqa: E402

ARCH = {
    "a": dict(num_layers=2, embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32,
              mlp_dim=512, vocab_size=512),
    "b": dict(num_layers=4, embed_dim=256, num_heads=8, num_kv_heads=4, head_dim=32,
              mlp_dim=1024, vocab_size=4096),
    "c": dict(num_layers=30, embed_dim=576, num_heads=9, num_kv_heads=3, head_dim=64,
              mlp_dim=1536, vocab_size=49152, rope_theta=100000.0, norm_eps=1e-5),
}
WORK = {
    "a": dict(arch="a", prompts=2, group=8, prompt=32, response=64),
    "b": dict(arch="b", prompts=4, group=4, prompt=32, response=64),
    "c": dict(arch="c", prompts=8, group=4, prompt=32, response=64),
    "d": dict(arch="b", requests=64, slots=16, prompt=32, min_response=8, max_response=256),
}
SMOKE_ARCH = dict(num_layers=1, embed_dim=32, num_heads=2, num_kv_heads=1, head_dim=16,
                  mlp_dim=64, vocab_size=64)
SMOKE_WORK = {
    "a": dict(arch="s", prompts=2, group=2, prompt=8, response=8),
    "d": dict(arch="s", requests=8, slots=4, prompt=8, min_response=2, max_response=16),
}


def timed_both(fn, repeats):
  """Median (CPU, wall) seconds of fn() after one warm-up (compile) call.

  CPU time of this (single-threaded, pinned) process is the figure we
  compare: on a machine shared with other jobs, wall time also counts the
  time slices the other jobs took.
  """
  jax.block_until_ready(fn(0))
  cpu, wall = [], []
  for i in range(repeats):
    start_cpu, start = time.process_time(), time.perf_counter()
    jax.block_until_ready(fn(i + 1))
    cpu.append(time.process_time() - start_cpu)
    wall.append(time.perf_counter() - start)
  return statistics.median(cpu), statistics.median(wall)


def timed(fn, repeats):
  return timed_both(fn, repeats)[0]


def measure_interleaved(systems, repeats):
  """Times [(row, fn), ...] round-robin: repeat i of every system, then repeat i + 1.

  The VM's speed drifts by 10-40% over tens of seconds (other tenants), so
  timing one system's repeats after another's can favour either; in turns,
  every system sees the same drift. Fills each row's median CPU and wall
  seconds (after one warm-up call each) and returns the rows.
  """
  for _, fn in systems:
    jax.block_until_ready(fn(0))
  cpu, wall = [[] for _ in systems], [[] for _ in systems]
  for i in range(repeats):
    for j, (_, fn) in enumerate(systems):
      start_cpu, start = time.process_time(), time.perf_counter()
      jax.block_until_ready(fn(i + 1))
      cpu[j].append(time.process_time() - start_cpu)
      wall[j].append(time.perf_counter() - start)
  for j, (row, _) in enumerate(systems):
    row.update(seconds=statistics.median(cpu[j]), wall_seconds=statistics.median(wall[j]),
               cpu_seconds_all=cpu[j])
  return [row for row, _ in systems]


def matmul_peak_flops(n=1024, repeats=5):
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  return 2 * n ** 3 / timed(lambda i: f(a), repeats)


def hf_model(config, params):
  """A transformers model with our architecture and weights (eval, f32)."""
  import torch  # noqa: PLC0415
  import transformers  # noqa: PLC0415
  torch.set_num_threads(1)
  hf_config = transformers.LlamaConfig(**{k: v for k, v in hf_lib.config_to_hf(config).items()
                                          if k not in ("architectures", "model_type")})
  model = transformers.LlamaForCausalLM(hf_config).eval()
  state = {name: torch.from_numpy(make()) for name, _, make in hf_lib.hf_tensors(config, params)}
  missing, unexpected = model.load_state_dict(state, strict=False)
  assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
  model.tie_weights()
  return model


def prefill_flops(config, rows, prompt_len):
  """Useful prefill FLOPs: weights on every token, causal attention, last-token head."""
  c = config
  per_token = 2 * (c.num_params - c.vocab_size * c.embed_dim - c.embed_dim)
  attn = 2 * c.num_layers * c.num_heads * c.head_dim * prompt_len * (prompt_len + 1)
  return rows * (prompt_len * per_token + attn + 2 * c.embed_dim * c.vocab_size)


def decode_matmuls_fn(config, rows, steps):
  """`steps` decode steps of `rows` rows that do only the model's matmuls.

  Per layer: q, k, v and output projections, gate/up/down MLP; then the
  tied head. No attention over the cache, no norms, no sampling: a floor
  under any f32 implementation of decoding (ours or another library's) on
  this core. The weights are arguments (no constant folding) and each step
  feeds the next (no hoisting).
  """
  c = config
  e, q, kv, f = c.embed_dim, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.mlp_dim
  shapes = [(e, q), (e, kv), (e, kv), (q, e), (e, f), (e, f), (f, e)]
  weights = [[jnp.full(s, 1e-3, jnp.float32) for s in shapes] for _ in range(c.num_layers)]
  head_ExV = jnp.full((e, c.vocab_size), 1e-3, jnp.float32)  # the head in its cheapest layout

  @jax.jit
  def run(layers, head_ExV, x_NxE):
    def step(_, x_NxE):
      for wq, wk, wv, wo, wg, wu, wd in layers:
        x_NxE = x_NxE + (x_NxE @ wq) @ wo + (x_NxE @ wk).sum() + (x_NxE @ wv).sum()
        x_NxE = x_NxE + ((x_NxE @ wg) * (x_NxE @ wu)) @ wd
      logits_NxV = x_NxE @ head_ExV
      return x_NxE + 1e-6 * logits_NxV[:, :e]
    return jax.lax.fori_loop(0, steps, step, x_NxE)

  x_NxE = jnp.ones((rows, e), jnp.float32)
  return lambda i: run(weights, head_ExV, x_NxE + i)


def torch_decode_matmuls_fn(config, rows, steps):
  """`decode_matmuls_fn` in PyTorch (one thread): the same floor with MKL's matmuls.

  The XLA floor alone would only bound XLA programs; the lower of the two
  bounds any f32 decoder built on either library's matmuls on this core.
  To keep Python's per-op cost small, q/k/v and gate/up are each one
  matmul of the concatenated weights (the same FLOPs), four per layer.
  """
  import torch  # noqa: PLC0415
  torch.set_num_threads(1)
  c = config
  e, q, kv, f = c.embed_dim, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.mlp_dim
  shapes = [(e, q + 2 * kv), (q, e), (e, 2 * f), (f, e)]
  layers = [[torch.full(s, 1e-3) for s in shapes] for _ in range(c.num_layers)]
  head_ExV = torch.full((e, c.vocab_size), 1e-3)

  def run(i):
    x_NxE = torch.ones(rows, e) + i
    with torch.inference_mode():
      for _ in range(steps):
        for w_qkv, wo, w_gu, wd in layers:
          x_NxE = x_NxE + (x_NxE @ w_qkv)[:, :q] @ wo
          gate_up = x_NxE @ w_gu
          x_NxE = x_NxE + (gate_up[:, :f] * gate_up[:, f:]) @ wd
        x_NxE = x_NxE + 1e-6 * (x_NxE @ head_ExV)[:, :e]
    return x_NxE.shape
  return run


def run_static(name, w, config, params, repeats, peak, with_hf, precisions=()):
  n, p, r = w["prompts"] * w["group"], w["prompt"], w["response"]
  prompts = jnp.asarray(np.repeat(np.random.default_rng(0).integers(
      1, config.vocab_size, (w["prompts"], p)), w["group"], axis=0), jnp.int32)
  lens = jnp.full((n,), p, jnp.int32)
  sampling = SamplingConfig(max_new_tokens=r, length_buckets=(p,))
  ours = lambda i: generate(params, prompts, lens, jax.random.key(i), model_config=config,
                            config=sampling, eos_id=None, pad_id=0,
                            group_size=w["group"]).tokens_BxT
  legacy = lambda i: sampling_legacy.generate(
      params, prompts, lens, jax.random.key(i), model_config=config,
      config=sampling_legacy.SamplingConfig(max_new_tokens=r), eos_id=-1, pad_id=0).tokens_BxT
  systems = [(dict(workload=name, system="rl_post engine"), ours),
             (dict(workload=name, system="rl_post main (static)"), legacy)]
  for precision in precisions:  # the sampler on the trainer's low-precision copy
    copy = jax.block_until_ready(jax.jit(low_precision.policy_copy, static_argnums=1)(
        params, precision))
    copy_config = low_precision.sampler_config(config, precision)
    systems.append((dict(workload=name, system=f"rl_post engine ({precision})"),
                    lambda i, copy=copy, copy_config=copy_config: generate(
                        copy, prompts, lens, jax.random.key(i), model_config=copy_config,
                        config=sampling, eos_id=None, pad_id=0,
                        group_size=w["group"]).tokens_BxT))
  if with_hf:
    import torch  # noqa: PLC0415
    model = hf_model(config, params)
    with torch.no_grad():
      hf_logits = model(torch.from_numpy(np.asarray(prompts[:2]))).logits.numpy()
    logit_diff = float(np.abs(hf_logits - np.asarray(models.apply(config, params,
                                                                  prompts[:2]))).max())
    ids = torch.from_numpy(np.asarray(prompts, np.int64))

    def hf_generate(i):
      torch.manual_seed(i)
      with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                              do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              max_new_tokens=r, min_new_tokens=r, eos_token_id=None,
                              pad_token_id=0).shape
    systems.append((dict(workload=name, system="HF generate (torch)",
                         hf_logit_max_diff=logit_diff), hf_generate))
  systems.append((dict(workload=name, system="matmuls only (floor)"),
                  decode_matmuls_fn(config, n, r)))
  if with_hf:
    systems.append((dict(workload=name, system="matmuls only, torch (floor)"),
                    torch_decode_matmuls_fn(config, n, r)))
  rows = measure_interleaved(systems, repeats)
  for row in rows:
    row.update(tokens=n * r, tokens_per_s=n * r / row["seconds"])
  seeds = row_seeds(jax.random.key(0), n)
  budget = jnp.full((n,), r, jnp.int32)
  prefill = lambda i: engine.prefill(params, prompts, lens, seeds, budget, model_config=config,
                                     capacity=p + r, group_size=w["group"], pad_id=0).logits_BxV
  seconds = timed(prefill, repeats)
  flops = prefill_flops(config, w["prompts"], p)
  rows[0].update(prefill_s=seconds, prefill_gflops=flops / seconds / 1e9,
                 prefill_mfu=flops / seconds / peak)
  return rows


def divergence(config, params, static_NxT, cont_NxT, seeds_N, prompt_len):
  """Where continuous and static tokens first differ, and how close that draw was.

  For each differing row: the slot, the two tokens, and the distance of
  u * total from the CDF boundary between them (from a full forward of the
  shared prefix): ~1e-7 means a float rounding flip, not a bug.
  """
  out = []
  for r in np.nonzero((static_NxT != cont_NxT).any(axis=1))[0]:
    t = int(np.nonzero(static_NxT[r] != cont_NxT[r])[0][0])
    logits = models.apply(config, params, jnp.asarray(static_NxT[r:r + 1, :t]))[0, -1]
    cdf = np.cumsum(np.asarray(jax.nn.softmax(logits), np.float64))
    u = float(controls.row_uniforms(jnp.asarray(seeds_N[r:r + 1]), jnp.asarray([t]))[0])
    lo = min(int(static_NxT[r, t]), int(cont_NxT[r, t]))
    out.append(dict(row=int(r), response_token=t - prompt_len + 1,
                    tokens=[int(static_NxT[r, t]), int(cont_NxT[r, t])],
                    cdf_margin=float(abs(u * cdf[-1] - cdf[lo]))))
  return out


def step_bound(budgets_N, slots: int) -> dict:
  """Decode steps of the static path vs continuous batching's, from the budgets alone.

  Static: batches of `slots` requests in input order, each as long as its
  longest. Continuous: requests enter free slots in input order (first in,
  first out: a scheduler does not know response lengths ahead) and the
  rollout ends with its last row. Their ratio is what continuous batching
  can gain if a step cost the same at any width; the draining batch's
  narrower (cheaper) steps and per-call overheads move the measured ratio
  above or below it.
  """
  budgets = [int(b) for b in budgets_N]
  static = sum(max(budgets[j:j + slots]) for j in range(0, len(budgets), slots))
  ends = [0] * slots
  for b in budgets:
    ends[ends.index(min(ends))] += b
  return dict(static_steps=static, continuous_steps=max(ends),
              full_width_steps=sum(budgets) / slots, ratio=static / max(ends))


def run_continuous(name, w, config, params, repeats):
  rng = np.random.default_rng(1)
  n, p, slots = w["requests"], w["prompt"], w["slots"]
  prompts = jnp.asarray(rng.integers(1, config.vocab_size, (n, p)), jnp.int32)
  lens = jnp.full((n,), p, jnp.int32)
  budgets = rng.integers(w["min_response"], w["max_response"] + 1, n).astype(np.int32)
  sampling = SamplingConfig(max_new_tokens=w["max_response"], length_buckets=(p,))
  seeds = lambda i: row_seeds(jax.random.key(i), n)

  def static(i):
    s = seeds(i)
    return [generate(params, prompts[j:j + slots], lens[j:j + slots], None, seeds_B=s[j:j + slots],
                     model_config=config, config=sampling, eos_id=None, pad_id=0,
                     max_new_tokens=budgets[j:j + slots]).tokens_BxT for j in range(0, n, slots)]

  def continuous(i, shrink=True, refill_fraction=1 / slots):
    return generate_continuous(params, prompts, lens, seeds(i), model_config=config,
                               config=sampling, num_slots=slots, eos_id=None, pad_id=0,
                               max_new_tokens=budgets, refill_fraction=refill_fraction,
                               shrink=shrink)[0].tokens_BxT
  a, b = np.concatenate(jax.device_get(static(7))), continuous(7)
  same = bool(np.array_equal(a, b))
  rows = measure_interleaved([
      (dict(workload=name, system="rl_post continuous", tokens_equal_static=same,
            divergence=divergence(config, params, a, b, seeds(7), p),
            step_bound=step_bound(budgets, slots)), continuous),
      (dict(workload=name, system="rl_post continuous (no shrink)"),
       lambda i: continuous(i, shrink=False)),
      (dict(workload=name, system="rl_post continuous (refill at 1/4 free)"),
       lambda i: continuous(i, refill_fraction=0.25)),
      (dict(workload=name, system="rl_post static"), static)], repeats)
  for row in rows:
    row.update(tokens=int(budgets.sum()), tokens_per_s=float(budgets.sum()) / row["seconds"])
  return rows


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--workloads", default="a,b,d")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--core", type=int, default=None, help="CPU to pin to (default: last)")
  parser.add_argument("--no_hf", action="store_true")
  parser.add_argument("--precisions", default="",
                      help="low-precision rollout copies to time too, e.g. bfloat16,int8")
  parser.add_argument("--smoke", action="store_true", help="tiny sizes, for tests")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "sampling.json"))
  args = parser.parse_args()
  unknown = sorted(set(args.workloads.split(",")) - set(WORK))
  if unknown:
    parser.error(f"--workloads: unknown {unknown}; known: {sorted(WORK)}")
  precisions = tuple(p for p in args.precisions.split(",") if p)
  if set(precisions) - (set(low_precision.PRECISIONS) - {"float32"}):
    parser.error(f"--precisions: each one of bfloat16, int8 (the engine row is float32), "
                 f"got {args.precisions!r}")
  core = max(os.sched_getaffinity(0)) if args.core is None else args.core
  os.sched_setaffinity(0, {core})
  arch = {"s": SMOKE_ARCH, **ARCH}
  work = SMOKE_WORK if args.smoke else {k: WORK[k] for k in args.workloads.split(",")}
  load_before = os.getloadavg()
  peak = matmul_peak_flops(256 if args.smoke else 1024)
  rows = []
  for name, w in work.items():
    config = models.ModelConfig(**arch[w["arch"]], attention_impl="xla")
    params = models.init_params(config, jax.random.key(0))
    if "requests" in w:
      rows += run_continuous(name, w, config, params, args.repeats)
    else:
      rows += run_static(name, w, config, params, args.repeats, peak, not args.no_hf,
                         precisions)
    for row in rows:
      if row["workload"] == name:
        print(json.dumps(row), flush=True)
  speedups = {}
  for name in work:
    by = {r["system"]: r["tokens_per_s"] for r in rows if r["workload"] == name}
    best = by.get("rl_post engine", by.get("rl_post continuous"))
    speedups[name] = {k: best / v for k, v in by.items()}
  floors = {}  # can any f32 implementation reach 3x HF on this core? (decode_matmuls_fn)
  for name in work:
    by = {r["system"]: r["tokens_per_s"] for r in rows if r["workload"] == name}
    if "matmuls only (floor)" in by and "HF generate (torch)" in by:
      fastest = max(by["matmuls only (floor)"], by.get("matmuls only, torch (floor)", 0.0))
      floors[name] = dict(matmuls_only_tokens_per_s=by["matmuls only (floor)"],
                          torch_matmuls_only_tokens_per_s=by.get("matmuls only, torch (floor)"),
                          three_x_hf_tokens_per_s=3 * by["HF generate (torch)"],
                          three_x_hf_reachable=fastest > 3 * by["HF generate (torch)"],
                          engine_frac_of_matmuls_only=by["rl_post engine"]
                          / by["matmuls only (floor)"])
  precision_vs_hf = {}  # each rollout precision's tokens/s over HF generate's (f32)
  for name in work:
    by = {r["system"]: r["tokens_per_s"] for r in rows if r["workload"] == name}
    if "HF generate (torch)" in by:
      precision_vs_hf[name] = {p: by[f"rl_post engine ({p})"] / by["HF generate (torch)"]
                               for p in precisions}
      precision_vs_hf[name]["float32"] = by["rl_post engine"] / by["HF generate (torch)"]
  print(f"\nf32 matmul peak (1 core): {peak / 1e9:.1f} GFLOP/s; load avg before "
        f"{load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} (shared machine)")
  print(f"{'wl':<3}{'system':<24}{'tokens':>8}{'cpu s/batch':>12}{'wall s':>8}{'tok/s':>9}"
        f"{'engine x':>10}{'prefill MFU':>13}")
  for r in rows:
    mfu = f"{100 * r['prefill_mfu']:.1f}%" if "prefill_mfu" in r else ""
    print(f"{r['workload']:<3}{r['system']:<24}{r['tokens']:>8}{r['seconds']:>12.3f}"
          f"{r['wall_seconds']:>8.3f}"
          f"{r['tokens_per_s']:>9.0f}{speedups[r['workload']][r['system']]:>10.2f}{mfu:>13}")
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(core=core, matmul_peak_gflops=peak / 1e9, load_avg_before=load_before,
                   load_avg_after=os.getloadavg(), smoke=args.smoke, rows=rows,
                   speedups=speedups, floors=floors, precision_vs_hf=precision_vs_hf,
                   cpu=host_cpu.describe()), f, indent=1)
  for name, fl in floors.items():
    torch_rate = fl["torch_matmuls_only_tokens_per_s"]
    print(f"{name}: matmuls alone allow {fl['matmuls_only_tokens_per_s']:.0f} tok/s (XLA)"
          + (f", {torch_rate:.0f} tok/s (torch)" if torch_rate else "")
          + f"; 3x HF is {fl['three_x_hf_tokens_per_s']:.0f}"
          + ("" if fl["three_x_hf_reachable"] else " (above both floors: out of reach)")
          + f"; the engine runs at {100 * fl['engine_frac_of_matmuls_only']:.0f}% of the XLA "
          "matmuls-only rate")
  for name, ratios in precision_vs_hf.items():
    print(f"{name}: engine tokens/s over HF generate (f32) by rollout precision: "
          + ", ".join(f"{p} {x:.2f}x" for p, x in ratios.items()))
  for r in rows:
    if "step_bound" in r:
      b = r["step_bound"]
      print(f"{r['workload']}: decode steps static {b['static_steps']} vs continuous (first in, "
            f"first out) {b['continuous_steps']}: at most {b['ratio']:.2f}x at equal step cost")
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
