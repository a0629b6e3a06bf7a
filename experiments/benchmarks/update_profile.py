r"""Where the RL update's time goes: per-op CPU trace of update_speed.py's compiled update.

  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/update_profile.py
  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/update_profile.py --remat=full --grad_accum=2
  PYTHONPATH=. python experiments/benchmarks/update_profile.py --smoke --out=/tmp/u.json

Compiles the update step (loss, gradient, AdamW) of `update_speed.py`'s
workload as that benchmark's child does, runs it under `jax.profiler`, and
sums each XLA op's time per update from the Perfetto trace. Ops are grouped
by what they compute, read from the compiled HLO: matmuls, transposing
copies, and other fusions by their leading op. The profiler adds a few
microseconds to every op, so shares are indicative; `update_speed.py` has
the timings. Writes a table and experiments/benchmarks/results/update_profile.json.
"""

import argparse
import collections
import json
import os
import sys
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments.benchmarks import decode_profile  # noqa: E402
from experiments.benchmarks import update_speed  # noqa: E402

from rl_post.metrics import host_cpu  # noqa: E402
from rl_post.training import host_memory  # noqa: E402


def group(ops: set) -> str:
  """What one compiled op of the update computes."""
  if "dot" in ops:
    return "matmul"
  if "transpose" in ops:
    return "transposing copy"
  if "dynamic-update-slice" in ops or "dynamic-slice" in ops:
    return "layer-scan slicing (+ fused elementwise)"
  if "exponential" in ops or "log" in ops:
    return "exp/log (softmax, sigmoid)"
  return "other elementwise and reductions"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--remat", default="none", help="rl.remat")
  parser.add_argument("--grad_accum", type=int, default=1, help="rl.grad_accum")
  parser.add_argument("--calls", type=int, default=5, help="profiled updates")
  parser.add_argument("--top", type=int, default=12, help="ops listed outside matmuls")
  parser.add_argument("--smoke", action="store_true", help="tiny sizes, for tests")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "update_profile.json"))
  args = parser.parse_args(argv)
  host_memory.apply_policy()  # as every rl_post entry point does
  try:
    step, state, batch, _, _ = update_speed.update_setup(
        dict(smoke=args.smoke, remat=args.remat, grad_accum=args.grad_accum))
  except ValueError as e:  # the rl config's own message: rl.remat, rl.grad_accum
    parser.error(str(e))
  kinds = decode_profile.op_kinds(step.lower(state, batch).compile().as_text())
  for _ in range(2):  # compile, then one warm call
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    for _ in range(args.calls):
      state, metrics = step(state, batch)
      jax.block_until_ready(metrics)
    jax.profiler.stop_trace()
    dur, _ = decode_profile.trace_durations(trace_dir)
  by_group, ops = collections.Counter(), []
  for name, total_us in dur.items():
    if name not in kinds:
      continue  # profiler spans, not ops
    shape, kind = kinds[name]
    ms = total_us / args.calls / 1000
    by_group[group(kind)] += ms
    ops.append(dict(op=name, shape=shape, group=group(kind), ops=sorted(kind), ms_per_update=ms))
  ops.sort(key=lambda o: -o["ms_per_update"])
  total = sum(by_group.values())
  cpu = host_cpu.describe()
  print(f"update, remat={args.remat}, grad_accum={args.grad_accum}"
        f"{' (smoke)' if args.smoke else ''}: {total:.1f} ms traced per update "
        f"(profiler overhead included); CPU: {host_cpu.one_line(cpu)}")
  print(f"{'what':42s} {'ms':>8s} {'share':>7s}")
  for what, ms in by_group.most_common():
    print(f"{what:42s} {ms:8.2f} {ms / total:7.1%}")
  print(f"\nlargest ops outside matmuls:\n{'ms':>7s}  {'shape':34s} ops")
  for o in [o for o in ops if o["group"] != "matmul"][:args.top]:
    print(f"{o['ms_per_update']:7.2f}  {o['shape']:34s} {','.join(o['ops'])}")
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(smoke=args.smoke, remat=args.remat, grad_accum=args.grad_accum, cpu=cpu,
                   ms_per_update=total, by_group=dict(by_group), ops=ops), f, indent=1)
  print(f"wrote {args.out}")
  return by_group


if __name__ == "__main__":
  main()
