"""Speed of the RL update (loss, gradient, AdamW) on one pinned core: this tree vs a git ref.

  python experiments/benchmarks/update_speed.py                   # vs 936629e (before this work)
  python experiments/benchmarks/update_speed.py --smoke --before-ref=HEAD --out=/tmp/u.json
  # this tree with the whole-step benchmark's settings for a small model on CPU
  python experiments/benchmarks/update_speed.py --settings='{"unroll_layers": 4, "logprob_remat": false}'

`experiments/benchmarks/grpo_step.py` runs it too and puts its rows in
grpo_step.json. Each measurement is a child process pinned with taskset to
one core, XLA single-threaded, importing `rl_post` either from this tree or
from `git archive <ref>` of it, on issue 15's small workload (4 layers,
d=256, vocab 4096, 4 prompts x G=4, prompt 32, response 64). Seconds are
CPU seconds of that process (median of `repeats` steps after the compiling
one): on a shared machine, wall time also counts other jobs' time slices.
The two trees alternate, `rounds` times each; the table keeps each tree's
best round. GFLOP are counted from the model's shapes (`update_gflop`: 3x
the forward of every position, attention over the full T x T blocks), the
same work for both trees; XLA's cost analysis counts a `lax.scan` body once,
which is why main's benchmark reported 19.4 GFLOP for this step. The
matmul peak is the best f32 matmul of the model's shapes in the same child.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results", "update_speed.json")
BEFORE_REF = "936629e"  # main before the update-speed work (issue 15)
SINGLE_THREAD = " --xla_cpu_multi_thread_eigen=false"
# (remat, grad_accum): the fastest setting and the memory-saving one of the small workload
CONFIGS = (("none", 1), ("full", 2))


def workload(smoke: bool) -> dict:
  if smoke:
    return dict(model=dict(vocab_size=512, num_layers=2, embed_dim=32, num_heads=2,
                           num_kv_heads=1, head_dim=16, mlp_dim=64),
                rl=dict(batch_size=2, num_generations=2, max_prompt_len=8, max_new_tokens=16,
                        logprob_chunk=8))
  return dict(model=dict(vocab_size=4096, num_layers=4, embed_dim=256, num_heads=4,
                         num_kv_heads=4, head_dim=64, mlp_dim=1024),
              rl=dict(batch_size=4, num_generations=4, max_prompt_len=32, max_new_tokens=64,
                      logprob_chunk=32))


def update_gflop(model: dict, n: int, t: int) -> float:
  """FLOPs of forward + backward (3x forward) over n sequences of t tokens, / 1e9."""
  e, h, k, d = model["embed_dim"], model["num_heads"], model["num_kv_heads"], model["head_dim"]
  dense = 2 * (2 * e * h * d + 2 * e * k * d + 3 * e * model["mlp_dim"])  # per token, layer
  attention = 2 * 2 * t * h * d  # scores and values over t keys, per token, layer
  forward = n * t * (model["num_layers"] * (dense + attention) + 2 * e * model["vocab_size"])
  return 3 * forward / 1e9


def update_setup(spec: dict):
  """(jitted update step, state, batch, model config, rl config) of the workload.

  spec: smoke, remat, grad_accum and optional rl_settings. Imports `rl_post`
  where it is called: the pinned child runs it against the tree it times.
  """
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  import optax  # noqa: PLC0415
  from rl_post import models  # noqa: PLC0415
  from rl_post.rl import config as rl_config  # noqa: PLC0415
  from rl_post.rl.train_step import make_rl_train_step  # noqa: PLC0415
  from rl_post.training.state import TrainState  # noqa: PLC0415

  w = workload(spec["smoke"])
  model = models.ModelConfig(attention_impl="xla", **w["model"])
  rl = rl_config.load(dict(w["rl"], remat=spec["remat"], grad_accum=spec["grad_accum"],
                           **spec.get("rl_settings", {})))
  n, p, r = rl.batch_size * rl.num_generations, rl.max_prompt_len, rl.max_new_tokens
  optimizer = optax.adamw(1e-5)
  params = models.init_params(model, jax.random.key(0))
  state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params),
                     rng=jax.random.key(1))
  rng = np.random.default_rng(0)
  mask = np.zeros((n, p + r), np.int32)
  mask[:, p:] = 1
  batch = dict(tokens=rng.integers(0, model.vocab_size, (n, p + r)).astype(np.int32),
               mask=mask, old_logp=np.log(rng.uniform(0.01, 1, (n, p + r))).astype(np.float32),
               adv=rng.normal(size=(n, p + r)).astype(np.float32) * mask)
  step = jax.jit(make_rl_train_step(model, rl, optimizer), donate_argnums=0)
  return step, state, batch, model, rl


def _child(spec: dict) -> dict:
  """Runs in the pinned child: compiles and times one update config."""
  import jax  # noqa: PLC0415

  step, state, batch, model, rl = update_setup(spec)
  n, p, r = rl.batch_size * rl.num_generations, rl.max_prompt_len, rl.max_new_tokens
  start = time.process_time()
  state, metrics = step(state, batch)
  first = dict(loss=float(metrics["loss"]), grad_norm=float(metrics["grad_norm"]))
  compile_cpu_s = time.process_time() - start
  cpu, wall = [], []
  for _ in range(spec["repeats"]):
    start_cpu, start = time.process_time(), time.perf_counter()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    cpu.append(time.process_time() - start_cpu)
    wall.append(time.perf_counter() - start)
  tokens = n * (p + r)
  e, f, v = model.embed_dim, model.mlp_dim, model.vocab_size
  return dict(cpu_s=statistics.median(cpu), cpu_min_s=min(cpu), wall_s=statistics.median(wall),
              compile_cpu_s=compile_cpu_s, first_step=first,
              matmul_peak_gflops=_matmul_peak([(tokens, e, f), (tokens, f, e), (tokens, e, v)],
                                              spec["repeats"]))


def _matmul_peak(shapes, repeats: int) -> float:
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  best = 0.0
  for m, k, n in shapes:
    a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    for _ in range(max(repeats, 3)):
      start = time.process_time()
      f(a, b).block_until_ready()
      best = max(best, 2 * m * k * n / max(time.process_time() - start, 1e-9) / 1e9)
  return best


def check_ref(ref: str) -> str:
  """`ref` if it names a commit of this repository that has `rl_post`; ValueError otherwise."""
  found = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet",
                          f"{ref}^{{commit}}"], capture_output=True, text=True, check=False)
  if found.returncode:
    raise ValueError(f"--before-ref: {ref!r} is not a commit of {ROOT} (a fresh clone needs "
                     "its full history: git fetch --unshallow)")
  listed = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", ref, "rl_post"],
                          capture_output=True, text=True, check=False)
  if "rl_post" not in listed.stdout.split():
    raise ValueError(f"--before-ref: commit {ref!r} has no rl_post package to time")
  return ref


def tree_of(ref: str, workdir: str) -> str:
  """A directory whose `rl_post` is the package at git `ref` ("" = this tree)."""
  if not ref:
    return ROOT
  out = os.path.join(workdir, ref.replace("/", "_"))
  os.makedirs(out, exist_ok=True)
  archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "rl_post"], check=True,
                           capture_output=True).stdout
  subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
  return out


def run_child(tree: str, spec: dict, core: int) -> dict:
  env = dict(os.environ, PYTHONPATH=tree,
             XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + SINGLE_THREAD)
  cmd = ["taskset", "-c", str(core), sys.executable, os.path.abspath(__file__),
         "--child", json.dumps(spec)]
  done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  if done.returncode:
    raise RuntimeError(f"update_speed child failed ({tree}):\n{done.stderr[-3000:]}")
  return json.loads(done.stdout.strip().splitlines()[-1])


def check_settings(settings: dict, smoke: bool = False) -> dict:
  """`settings` (rl section keys, e.g. {"unroll_layers": 4}) if this tree's rl config
  accepts them with the workload's; raises ValueError naming the bad one otherwise."""
  from rl_post.errors import ConfigError  # noqa: PLC0415
  from rl_post.rl import config as rl_config  # noqa: PLC0415
  if not isinstance(settings, dict):
    raise ValueError(f"--settings must be a JSON object of rl settings, got {settings!r}")
  try:
    rl_config.load(dict(workload(smoke)["rl"], **settings))
  except (ConfigError, TypeError, ValueError) as e:
    raise ValueError(f"--settings: {e}") from e
  return settings


def compare(before_ref: str = BEFORE_REF, *, smoke: bool = False, repeats: int = 5,
            rounds: int = 2, core: int | None = None, configs=CONFIGS,
            settings: dict | None = None) -> list[dict]:
  """Rows (tree x config) of CPU seconds per update, GFLOP/s and % of matmul peak.

  settings: rl settings for this tree's children only (the ref's code may not
  know them), e.g. the whole-step benchmark's {"unroll_layers": 4,
  "logprob_remat": False}; the rows name them.
  """
  core = sorted(os.sched_getaffinity(0))[-1] if core is None else core
  settings = check_settings(settings or {}, smoke)
  this_tree = "this tree" + (" + settings" if settings else "")
  w = workload(smoke)
  n = w["rl"]["batch_size"] * w["rl"]["num_generations"]
  gflop = update_gflop(w["model"], n, w["rl"]["max_prompt_len"] + w["rl"]["max_new_tokens"])
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    trees = {f"before ({before_ref})": tree_of(before_ref, tmp), this_tree: ROOT}
    for remat, accum in configs:
      spec = dict(smoke=smoke, remat=remat, grad_accum=accum, repeats=repeats)
      best = {}
      for _ in range(rounds):  # alternate the trees so load drift hits both
        for name, tree in trees.items():
          load = os.getloadavg()[0]
          tree_spec = dict(spec, rl_settings=settings) if name == this_tree else spec
          out = dict(run_child(tree, tree_spec, core), load_1min=load,
                     rl_settings=settings if name == this_tree else {})
          if name not in best or out["cpu_s"] < best[name]["cpu_s"]:
            best[name] = out
      for name, out in best.items():
        rows.append(dict(tree=name, remat=remat, grad_accum=accum, core=core, gflop=gflop,
                         gflops_per_s=gflop / out["cpu_s"],
                         frac_of_matmul_peak=gflop / out["cpu_s"] / out["matmul_peak_gflops"],
                         **out))
  return rows


def table(rows) -> str:
  head = (f"{'tree':<20} {'remat':>5} {'accum':>5} {'CPU s/update':>12} {'wall s':>7} "
          f"{'GFLOP':>6} {'GFLOP/s':>8} {'peak':>6} {'% peak':>7} {'load':>5}")
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(f"{r['tree']:<20} {r['remat']:>5} {r['grad_accum']:>5} {r['cpu_s']:>12.3f} "
                 f"{r['wall_s']:>7.3f} {r['gflop']:>6.1f} {r['gflops_per_s']:>8.1f} "
                 f"{r['matmul_peak_gflops']:>6.0f} {100 * r['frac_of_matmul_peak']:>6.1f}% "
                 f"{r['load_1min']:>5.1f}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--before-ref", default=BEFORE_REF)
  parser.add_argument("--smoke", action="store_true", help="tiny sizes, one config, one round")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--core", type=int, default=None)
  parser.add_argument("--out", default=RESULTS)
  parser.add_argument("--settings", default="{}",
                      help='rl settings of this tree\'s runs, JSON, e.g. '
                      '\'{"unroll_layers": 4, "logprob_remat": false}\' (the whole step\'s)')
  parser.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    print(json.dumps(_child(json.loads(args.child))))
    return None
  try:
    settings = json.loads(args.settings)
  except json.JSONDecodeError as e:
    parser.error(f"--settings is not JSON ({e}): {args.settings}")
  try:
    settings = check_settings(settings, args.smoke)
    check_ref(args.before_ref)
  except ValueError as e:
    parser.error(str(e))
  rows = compare(args.before_ref, smoke=args.smoke, repeats=args.repeats,
                 rounds=1 if args.smoke else 2, core=args.core,
                 configs=CONFIGS[:1] if args.smoke else CONFIGS, settings=settings)
  print(table(rows))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as fh:
    json.dump({"rows": rows, "uptime": os.getloadavg()}, fh, indent=1)
  return rows


if __name__ == "__main__":
  main()
