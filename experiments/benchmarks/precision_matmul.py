r"""Matmul speed by precision and operand layout on one core: why bf16 products accumulate in f32.

  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/precision_matmul.py
  PYTHONPATH=. python experiments/benchmarks/precision_matmul.py --smoke --out=/tmp/p.json

For each [M, K] @ [K, N] shape of the GRPO update and decode of workload (b)
(4 layers, d=256, MLP 1024, vocab 4096; 1,024 response rows, chunks of 512
for the head, 16 rows per decode step), times one jitted product:
  f32            f32 x f32 -> f32
  bf16->bf16     bf16 x bf16 -> bf16  (`x @ w` on bf16 arrays)
  bf16->f32      bf16 x bf16 -> f32   (`rl_post.models.matmul.dot_acc32`)
  bf16->f32 w^T  the same with the right operand read transposed (a
                 backward's `g @ w.T`)
  bf16->f32 x^T  the same with the left operand read transposed (a weight
                 gradient's `x.T @ g`)
Fastest of `--repeats` calls, single-threaded. Writes a table and
experiments/benchmarks/results/precision_matmul.json.
"""

import argparse
import json
import os
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from rl_post.models.matmul import dot_acc32  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "precision_matmul.json")
SHAPES = {  # (M, K, N) of workload (b)
    "update: MLP up": (1024, 256, 1024),
    "update: MLP down": (1024, 1024, 256),
    "update: head chunk": (512, 256, 4096),
    "decode: MLP up": (16, 256, 1024),
    "decode: head": (16, 256, 4096),
}
SMOKE_SHAPES = {"smoke": (32, 16, 64)}
KINDS = {
    "f32": (jnp.float32, lambda a, b: a @ b, False, False),
    "bf16->bf16": (jnp.bfloat16, lambda a, b: a @ b, False, False),
    "bf16->f32": (jnp.bfloat16, lambda a, b: dot_acc32(a, b, jnp.float32), False, False),
    "bf16->f32 w^T": (jnp.bfloat16, lambda a, b: dot_acc32(a, b.T, jnp.float32), False, True),
    "bf16->f32 x^T": (jnp.bfloat16, lambda a, b: dot_acc32(a.T, b, jnp.float32), True, False),
}


def seconds(m: int, k: int, n: int, kind: str, repeats: int) -> float:
  dtype, fn, lhs_t, rhs_t = KINDS[kind]
  a = jnp.full((k, m) if lhs_t else (m, k), 1e-2, dtype)
  b = jnp.full((n, k) if rhs_t else (k, n), 1e-2, dtype)
  run = jax.jit(fn)
  run(a, b).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    run(a, b).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return best


def measure(shapes: dict, repeats: int) -> list[dict]:
  rows = []
  for name, (m, k, n) in shapes.items():
    ms = {kind: 1e3 * seconds(m, k, n, kind, repeats) for kind in KINDS}
    rows.append(dict(shape=name, mkn=[m, k, n], ms=ms,
                     f32_over_bf16_f32=ms["f32"] / ms["bf16->f32"]))
  return rows


def table(rows: list[dict]) -> str:
  head = f"{'shape':<20}{'M,K,N':>16}" + "".join(f"{k:>15}" for k in KINDS) + f"{'f32/bf16->f32':>15}"
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(f"{r['shape']:<20}{','.join(map(str, r['mkn'])):>16}"
                 + "".join(f"{r['ms'][k]:>13.3f}ms" for k in KINDS)
                 + f"{r['f32_over_bf16_f32']:>14.2f}x")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true", help="one tiny shape, for tests")
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--out", default=RESULTS)
  args = parser.parse_args(argv)
  rows = measure(SMOKE_SHAPES if args.smoke else SHAPES, args.repeats)
  print(f"one jitted matmul, fastest of {args.repeats}, single-threaded XLA:CPU ({jax.__version__})")
  print(table(rows))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump({"jax": jax.__version__, "devices": str(jax.devices()), "repeats": args.repeats,
               "rows": rows}, f, indent=1)
  return rows


if __name__ == "__main__":
  main()
