r"""XLA:CPU's optional matmul libraries (XNNPACK, YNNPACK, oneDNN) on workload (b)'s f32 products.

  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/cpu_library_flags.py
  PYTHONPATH=. python experiments/benchmarks/cpu_library_flags.py --smoke --out=/tmp/f.json

The f32 (b) whole step is about 2x TRL's, short of the goal by a few percent,
and most of what is left is matrix products: the decode step's [16, K] @ [K, N]
run well below the large products' rate (`precision_matmul.py`). This asks
whether one of the libraries the installed XLA can route products to does
better than its default (Eigen). Each setting runs in its own process (XLA
reads its flags once), single-threaded, with only `--xla_cpu_multi_thread_eigen=false`
and the setting's flags (the caller's XLA_FLAGS are not passed on); the settings
take turns `--rounds` times, so drift of the machine hits all of them alike.
Per shape: the fastest call of each setting, its time over the default's,
its largest relative error against numpy's float64 product, and whether its
product has the default's bits (a library that took the product over would
round differently). A setting this XLA does not know
is reported as failed, with its error. Writes a table and
experiments/benchmarks/results/cpu_library_flags.json.
"""

import argparse
import json
import os
import subprocess
import sys
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "cpu_library_flags.json")
SHAPES = {  # (M, K, N) of workload (b): 4 layers, d=256, MLP 1024, vocab 4096
    "decode: q/k/v, o": (16, 256, 256),
    "decode: MLP up": (16, 256, 1024),
    "decode: MLP down": (16, 1024, 256),
    "decode: head": (16, 256, 4096),
    "update: MLP up": (1024, 256, 1024),
    "update: MLP down": (1024, 1024, 256),
    "update: head chunk": (512, 256, 4096),
}
SMOKE_SHAPES = {"smoke": (16, 32, 64)}
SETTINGS = {
    "default (Eigen)": "",
    "xnnpack": "--xla_cpu_use_xnnpack=true",
    "xnn fusions dot,eltwise": "--xla_cpu_experimental_xnn_fusion_type=dot,eltwise",
    "ynn fusions dot,eltwise": "--xla_cpu_experimental_ynn_fusion_type=dot,eltwise",
    "onednn": "--xla_cpu_use_onednn=true",
    "onednn fusions dot": "--xla_cpu_experimental_onednn_fusion_type=dot",
}
SMOKE_SETTINGS = ("default (Eigen)", "xnnpack")


def child(shapes: dict, calls: int) -> dict:
  """{shape: (fastest seconds of `calls`, max relative error vs float64, SHA-256 of the
  product's bytes)} in this process."""
  import hashlib

  import jax
  import jax.numpy as jnp
  import numpy as np
  out = {}
  rng = np.random.default_rng(0)
  for name, (m, k, n) in shapes.items():
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    run = jax.jit(lambda x, w: x @ w)
    xa, xb = jnp.asarray(a), jnp.asarray(b)
    got = np.asarray(run(xa, xb))
    want = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    best = float("inf")
    for _ in range(calls):
      start = time.perf_counter()
      run(xa, xb).block_until_ready()
      best = min(best, time.perf_counter() - start)
    out[name] = (best, error, hashlib.sha256(got.tobytes()).hexdigest())
  return out


def run_setting(flags: str, shapes_name: str, calls: int) -> dict:
  """`child` in a fresh process with `flags`; {"error": ...} when it fails."""
  env = dict(os.environ, XLA_FLAGS=f"--xla_cpu_multi_thread_eigen=false {flags}".strip(),
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", shapes_name,
                         f"--calls={calls}"], env=env, capture_output=True, text=True,
                        timeout=600)
  if proc.returncode != 0:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return {"error": next((line for line in lines if "Illegal value" in line or "Error" in line),
                          lines[-1] if lines else f"exit {proc.returncode}")[:300]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(settings: tuple[str, ...], smoke: bool, rounds: int, calls: int) -> list[dict]:
  shapes = SMOKE_SHAPES if smoke else SHAPES
  best = {s: {} for s in settings}
  errors, digests, failed = {s: {} for s in settings}, {s: {} for s in settings}, {}
  for _ in range(rounds):
    for setting in settings:
      if setting in failed:
        continue
      result = run_setting(SETTINGS[setting], "smoke" if smoke else "full", calls)
      if "error" in result:
        failed[setting] = result["error"]
        continue
      for shape, (seconds, error, digest) in result.items():
        best[setting][shape] = min(best[setting].get(shape, float("inf")), seconds)
        errors[setting][shape] = max(errors[setting].get(shape, 0.0), error)
        digests[setting][shape] = digest
  base = best[settings[0]]
  rows = []
  for setting in settings:
    row = dict(setting=setting, flags=SETTINGS[setting], failed=failed.get(setting, ""))
    if not row["failed"]:
      row["shapes"] = {shape: dict(mkn=list(shapes[shape]), us=1e6 * best[setting][shape],
                                   vs_default=best[setting][shape] / base[shape],
                                   gflops=2 * shapes[shape][0] * shapes[shape][1]
                                   * shapes[shape][2] / best[setting][shape] / 1e9,
                                   max_rel_error=errors[setting][shape],
                                   same_bits_as_default=(digests[setting][shape]
                                                         == digests[settings[0]][shape]))
                       for shape in shapes}
    rows.append(row)
  return rows


def table(rows: list[dict]) -> str:
  shapes = next((r["shapes"] for r in rows if "shapes" in r), {})
  head = (f"{'setting':<26}" + "".join(f"{s:>22}" for s in shapes) + f"{'max rel. error':>16}"
          f"{'bits = default':>16}")
  lines = [head, "-" * len(head)]
  for r in rows:
    if r["failed"]:
      lines.append(f"{r['setting']:<26}failed: {r['failed']}")
      continue
    cells = "".join(f"{c['us']:>10.1f}us ({c['vs_default']:.2f}x)" for c in r["shapes"].values())
    error = max(c["max_rel_error"] for c in r["shapes"].values())
    same = f"{sum(c['same_bits_as_default'] for c in r['shapes'].values())}/{len(r['shapes'])}"
    lines.append(f"{r['setting']:<26}{cells}{error:>16.1e}{same:>16}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true", help="one tiny shape, two settings")
  parser.add_argument("--rounds", type=int, default=5, help="turns of every setting")
  parser.add_argument("--calls", type=int, default=200, help="timed calls per shape and turn")
  parser.add_argument("--out", default=RESULTS)
  parser.add_argument("--child", choices=("full", "smoke"), help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    print(json.dumps(child(SMOKE_SHAPES if args.child == "smoke" else SHAPES, args.calls)))
    return None
  settings = SMOKE_SETTINGS if args.smoke else tuple(SETTINGS)
  rows = measure(settings, args.smoke, args.rounds, args.calls)
  print(f"one jitted f32 matmul, fastest of {args.rounds} x {args.calls} calls, single-threaded "
        f"XLA:CPU, each setting in its own process (load avg {os.getloadavg()[0]:.1f}); "
        "(x): time over the default's")
  print(table(rows))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump({"rounds": args.rounds, "calls": args.calls, "rows": rows}, f, indent=1)
  return rows


if __name__ == "__main__":
  main()
