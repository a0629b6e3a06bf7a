r"""The RL update under glibc's default malloc vs rl_post's host memory policy, one core.

  PYTHONPATH=. python experiments/benchmarks/host_malloc.py
  PYTHONPATH=. python experiments/benchmarks/host_malloc.py --smoke --out=/tmp/h.json

XLA:CPU gives each call of a compiled program one temp buffer; above 32 MiB
glibc maps it fresh and unmaps it on free, so every call page-faults it in
again (`rl_post/training/host_memory.py`). For each workload this runs the
trainer's update step (`make_rl_train_step`, f32, token-mean GRPO loss)
in a child process per policy, `RL_POST_HOST_MALLOC=system` (glibc's
default) and `auto` (what every rl_post entry point applies), in turns
(`--rounds` children each, pinned to the same core), and reports the
median seconds per update, page faults per update and the program's temp
buffer. Workloads:
  vs_trl  vs_trl.py's model (4 layers, d=128, vocab 299), 8 prompts x G=4,
          prompt 16, response 32
  b       the whole-step benchmark's workload (b) (4 layers, d=256, vocab
          4096), 4 prompts x G=4, prompt 32, response 64
Writes a table and experiments/benchmarks/results/host_malloc.json.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results", "host_malloc.json")
POLICIES = ("system", "auto")
WORKLOADS = {
    "vs_trl": dict(arch=dict(num_layers=4, embed_dim=128, num_heads=4, num_kv_heads=2,
                             head_dim=32, mlp_dim=384, vocab_size=299),
                   prompts=8, group=4, prompt=16, response=32),
    "b": dict(arch=dict(num_layers=4, embed_dim=256, num_heads=8, num_kv_heads=4, head_dim=32,
                        mlp_dim=1024, vocab_size=4096),
              prompts=4, group=4, prompt=32, response=64),
    "smoke": dict(arch=dict(num_layers=1, embed_dim=32, num_heads=2, num_kv_heads=1, head_dim=16,
                            mlp_dim=64, vocab_size=64),
                  prompts=2, group=2, prompt=8, response=8),
}


def child(name: str, calls: int) -> dict:
  """One policy's process: applies RL_POST_HOST_MALLOC first, then times the update."""
  from rl_post.training import host_memory
  malloc = host_memory.apply_policy()
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_cpu_multi_thread_eigen=false")
  import jax
  import jax.numpy as jnp
  import numpy as np
  from rl_post import models
  from rl_post.rl import config as rl_config
  from rl_post.rl.train_step import make_rl_train_step, rollout_batch
  from rl_post.training.optimizer import OptimizerConfig, make_optimizer
  from rl_post.training.state import TrainState

  w = WORKLOADS[name]
  p, g, plen, resp = w["prompts"], w["group"], w["prompt"], w["response"]
  config = models.ModelConfig(**w["arch"], attention_impl="xla")
  params = models.init_params(config, jax.random.key(0))
  rng = np.random.default_rng(0)
  n, t = p * g, plen + resp
  tokens = np.repeat(rng.integers(4, config.vocab_size, (p, t)), g, 0).astype(np.int32)
  tokens[:, plen:] = rng.integers(4, config.vocab_size, (n, resp))
  mask = np.zeros((n, t), np.int32)
  mask[:, plen:] = 1
  logp = np.where(mask, -np.log(config.vocab_size), 0.0).astype(np.float32)
  rl = rl_config.load(dict(batch_size=p, num_generations=g, max_prompt_len=plen,
                           max_new_tokens=resp,
                           grpo=dict(kl_coef=0.0, aggregation="token_mean", clip_high=0.28)))
  batch = rollout_batch(rl, tokens, mask, logp, rng.random(n).astype(np.float32))
  optimizer = make_optimizer(OptimizerConfig(learning_rate=2e-4, schedule="constant", b2=0.95))
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(2))
  update = jax.jit(make_rl_train_step(config, rl, optimizer))
  temp = update.lower(state, batch).compile().memory_analysis().temp_size_in_bytes
  jax.block_until_ready(update(state, batch))
  times, faults = [], []
  for _ in range(calls):
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    jax.block_until_ready(update(state, batch))
    times.append(time.perf_counter() - start)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
  return dict(workload=name, malloc=malloc, temp_bytes=int(temp), seconds=times, faults=faults)


def run_child(name: str, policy: str, calls: int, core: int) -> dict:
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", RL_POST_HOST_MALLOC=policy)
  proc = subprocess.run(["taskset", "-c", str(core), sys.executable, os.path.abspath(__file__),
                         f"--child={name}", f"--calls={calls}"], env=env, capture_output=True,
                        text=True, check=False)
  if proc.returncode:
    raise RuntimeError(f"{name}/{policy} child failed:\n{proc.stderr[-3000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def rows_for(names, rounds: int, calls: int, core: int) -> list[dict]:
  runs = {(name, policy): [] for name in names for policy in POLICIES}
  for _ in range(rounds):  # in turns, so drift of the machine hits both policies alike
    for name in names:
      for policy in POLICIES:
        runs[(name, policy)].append(run_child(name, policy, calls, core))
  rows = []
  for (name, policy), children in runs.items():
    seconds = [s for c in children for s in c["seconds"]]
    faults = [f for c in children for f in c["faults"]]
    rows.append(dict(workload=name, policy=policy, applied=children[0]["malloc"]["applied"],
                     temp_mb=children[0]["temp_bytes"] / 2**20,
                     update_s=statistics.median(seconds),
                     faults_per_update=statistics.median(faults), calls=len(seconds)))
  for row in rows:
    base = next(r for r in rows if r["workload"] == row["workload"] and r["policy"] == "system")
    row["speedup_vs_system"] = base["update_s"] / row["update_s"]
  return rows


def table(rows: list[dict]) -> str:
  head = (f"{'workload':<9}{'policy':<8}{'applied':>8}{'temp MB':>9}{'update s':>10}"
          f"{'faults/update':>15}{'speedup':>9}")
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(f"{r['workload']:<9}{r['policy']:<8}{str(r['applied']):>8}{r['temp_mb']:>9.1f}"
                 f"{r['update_s']:>10.4f}{r['faults_per_update']:>15.0f}"
                 f"{r['speedup_vs_system']:>9.2f}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true", help="tiny model, for tests")
  parser.add_argument("--rounds", type=int, default=3, help="children per policy and workload")
  parser.add_argument("--calls", type=int, default=10, help="timed updates per child")
  parser.add_argument("--core", type=int, default=None, help="CPU to pin to (default: last)")
  parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--out", default=RESULTS)
  args = parser.parse_args(argv)
  if args.child:
    print(json.dumps(child(args.child, args.calls)))
    return None
  core = max(os.sched_getaffinity(0)) if args.core is None else args.core
  load = os.getloadavg()[0]
  rows = rows_for(["smoke"] if args.smoke else ["vs_trl", "b"], args.rounds, args.calls, core)
  print(f"RL update, f32, one core (core {core}; load avg before {load:.1f}, after "
        f"{os.getloadavg()[0]:.1f}); median over {args.rounds} x {args.calls} calls per row")
  print(table(rows))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(core=core, load_avg_before=load, load_avg_after=os.getloadavg()[0],
                   rows=rows), f, indent=1)
  print(f"wrote {args.out}")
  return rows


if __name__ == "__main__":
  main()
