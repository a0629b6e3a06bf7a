r"""8-bit AdamW against f32 AdamW on a small regression problem: the two loss curves.

  PYTHONPATH=. python experiments/benchmarks/adamw_8bit_parity.py
  PYTHONPATH=. python experiments/benchmarks/adamw_8bit_parity.py --steps=500 --seeds=0,1,2

A student MLP (32 -> 128 -> 128 -> 8, tanh) regresses a random teacher MLP's
outputs from Gaussian inputs, in minibatches of 64 out of 1024 examples. Both
runs use `make_optimizer` from the same `OptimizerConfig` (constant lr 3e-3,
b1 0.9, b2 0.95, clip 1.0) apart from `state_dtype`; the two hidden weight
matrices (4096 and 16384 values) get 8-bit moments, the output layer (1024)
and biases keep f32 ones (below `adamw_8bit.MIN_QUANTIZED_SIZE`). Same init,
same batches: the curves differ only through the optimizer state. The loss
is the full-data mean squared error after each step. Prints per seed the
first and final losses and the gap, and writes JSON (--out, default
/tmp/adamw_8bit_parity.json).
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from rl_post.training.optimizer import OptimizerConfig, make_optimizer  # noqa: E402

SIZES = (32, 128, 128, 8)
NUM_EXAMPLES, BATCH = 1024, 64


def init_mlp(rng, sizes=SIZES):
  """[{"w": [in, out], "b": [out]}] with 1/sqrt(in) scaled normal weights."""
  layers = []
  for key, (n_in, n_out) in zip(jax.random.split(rng, len(sizes) - 1), zip(sizes, sizes[1:])):
    layers.append(dict(w=jax.random.normal(key, (n_in, n_out)) / jnp.sqrt(n_in),
                       b=jnp.zeros((n_out,))))
  return layers


def mlp(params, x_NxI):
  for layer in params[:-1]:
    x_NxI = jnp.tanh(x_NxI @ layer["w"] + layer["b"][None, :])
  return x_NxI @ params[-1]["w"] + params[-1]["b"][None, :]


def problem(seed: int):
  """(x_NxI, y_NxO, student params): a random teacher's regression targets."""
  data_key, teacher_key, student_key = jax.random.split(jax.random.key(seed), 3)
  x = jax.random.normal(data_key, (NUM_EXAMPLES, SIZES[0]))
  teacher = init_mlp(teacher_key, (SIZES[0], 64, SIZES[-1]))
  return x, mlp(teacher, x) * 3.0, init_mlp(student_key)


def loss_curve(optimizer: optax.GradientTransformation, seed: int, steps: int) -> jax.Array:
  """Full-data MSE after each of `steps` minibatch updates: [steps]."""
  x, y, params = problem(seed)
  mse = lambda p, xb, yb: jnp.mean(jnp.square(mlp(p, xb) - yb))
  batch_keys = jax.random.split(jax.random.key(seed + 1000), steps)

  def step(carry, key):
    params, opt_state = carry
    idx = jax.random.choice(key, NUM_EXAMPLES, (BATCH,), replace=False)
    grads = jax.grad(mse)(params, x[idx], y[idx])
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return (params, opt_state), mse(params, x, y)

  run = jax.jit(lambda p: jax.lax.scan(step, (p, optimizer.init(p)), batch_keys)[1])
  return run(params)


def compare(seed: int, steps: int, learning_rate: float = 3e-3) -> dict:
  """Both curves and their gaps for one seed."""
  curves = {}
  for state_dtype in ("float32", "int8"):
    config = OptimizerConfig(learning_rate=learning_rate, schedule="constant",
                             total_steps=steps, state_dtype=state_dtype)
    curves[state_dtype] = [float(v) for v in loss_curve(make_optimizer(config), seed, steps)]
  f32, q8 = curves["float32"], curves["int8"]
  rel = [abs(a - b) / a for a, b in zip(f32, q8)]
  return dict(seed=seed, steps=steps, learning_rate=learning_rate, first_loss=f32[0],
              final_loss_f32=f32[-1], final_loss_int8=q8[-1],
              final_rel_gap=rel[-1], max_rel_gap=max(rel), curves=curves)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--seeds", default="0", help="comma-separated ints")
  parser.add_argument("--out", default="/tmp/adamw_8bit_parity.json")
  args = parser.parse_args(argv)
  if args.steps < 1:
    parser.error("--steps must be >= 1")
  try:
    seeds = [int(s) for s in args.seeds.split(",")]
  except ValueError:
    parser.error(f"--seeds must be comma-separated ints, got {args.seeds!r}")
  results = [compare(seed, args.steps) for seed in seeds]
  print(f"{'seed':>4} {'first':>8} {'final f32':>10} {'final int8':>10} {'final gap':>9} "
        f"{'max gap':>8}")
  for r in results:
    print(f"{r['seed']:>4} {r['first_loss']:>8.4f} {r['final_loss_f32']:>10.5f} "
          f"{r['final_loss_int8']:>10.5f} {100 * r['final_rel_gap']:>8.2f}% "
          f"{100 * r['max_rel_gap']:>7.2f}%")
  with open(args.out, "w") as f:
    json.dump(dict(results=results), f, indent=1)
  return results


if __name__ == "__main__":
  main()
