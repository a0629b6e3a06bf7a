r"""Where a decode step's time goes: per-op CPU trace of the compiled decode loop.

  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/decode_profile.py            # workload b
  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/decode_profile.py --smoke --out /tmp/p.json
  # a step of workload d's draining batch: 8 rows, capacity 288
  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/decode_profile.py --rows 8 --group 1 \
      --response 256 --calls 1 --out /tmp/p8.json

Runs the rollout engine's decode loop (`rl_post.sampling.engine.decode`) on
workload b of `sampling.py` (4 layers, d=256, vocab 4096, 16 rows,
capacity 96, temperature 1) under `jax.profiler`, reads the Perfetto trace
it writes, and sums the time of every XLA op executed once per decode step.
Each op is labelled from the compiled HLO by what it computes (matmul,
attention scores/values, softmax, KV-cache write, sampling, ...), so the
table says how a step splits between matmuls and everything else. The
profiler adds a few microseconds to every op, so small ops look larger
than they are: shares are indicative; `sampling.py` has the real timings.
Writes a table and experiments/benchmarks/results/decode_profile.json.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments.benchmarks import sampling as sampling_bench  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.sampling import engine  # noqa: E402
from rl_post.sampling.sampler import SamplingConfig, row_seeds  # noqa: E402

_SKIP = {"parameter", "bitcast", "constant", "broadcast", "reshape", "get-tuple-element",
         "tuple", "iota"}


def op_kinds(hlo_text: str) -> dict:
  """{instruction name: the set of HLO ops it runs} for fusions and plain ops."""
  bodies, kinds = {}, {}
  for match in re.finditer(r"^%(\S+) \(.*?^}", hlo_text, re.M | re.S):
    bodies[match.group(1)] = set(re.findall(r"= \S+ ([a-z-]+)\(", match.group(0))) - _SKIP
  for line in hlo_text.splitlines():
    m = re.match(r"\s+%(\S+) = (\S+) ([a-z-]+)\(", line)
    if not m:
      continue
    calls = re.search(r"calls=%([^,\s]+)", line)
    kinds[m.group(1)] = (m.group(2), bodies.get(calls.group(1), set()) if calls and
                         m.group(3) == "fusion" else {m.group(3)})
  return kinds


def label(shape: str, ops: set, rows: int, vocab: int, capacity: int) -> str:
  """A human label for one op of the decode step."""
  if ops == {"dot"}:
    if f",{vocab}]" in shape:
      return "matmul: output head"
    if shape.count(",") >= 3:
      return "attention: scores" if f",{capacity}]" in shape else "attention: values"
    return "matmul: projections and MLP"
  if "scatter" in ops:
    return "KV cache write"
  if "exponential" in ops and f",{capacity}]" in shape:
    return "attention: softmax"
  if (f",{vocab}]" in shape or re.match(rf"\w+\[{rows}\]", shape) or
      {"while", "reduce-window"} & ops):
    return "sampling, log-prob, row state"
  if {"sine", "cosine"} & ops:
    return "RoPE"
  if "reduce" in ops and "multiply" in ops:
    return "RMSNorm"
  return "other elementwise"


def trace_durations(trace_dir: str) -> tuple:
  path = glob.glob(os.path.join(trace_dir, "plugins/profile/*/perfetto_trace.json.gz"))[0]
  events = json.load(gzip.open(path))
  events = events["traceEvents"] if isinstance(events, dict) else events
  dur, count = collections.Counter(), collections.Counter()
  for e in events:
    if e.get("ph") == "X":
      dur[e["name"]] += e["dur"]
      count[e["name"]] += 1
  return dur, count


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--calls", type=int, default=3, help="profiled decode calls")
  parser.add_argument("--rows", type=int, default=16, help="decode batch width")
  parser.add_argument("--group", type=int, default=4, help="rows sharing a prompt")
  parser.add_argument("--response", type=int, default=64, help="tokens per row (capacity: 32 +)")
  parser.add_argument("--smoke", action="store_true", help="tiny sizes, for tests")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "decode_profile.json"))
  args = parser.parse_args()
  arch = sampling_bench.SMOKE_ARCH if args.smoke else sampling_bench.ARCH["b"]
  n, p, r, g = (4, 8, 8, 2) if args.smoke else (args.rows, 32, args.response, args.group)
  if n % g:
    raise SystemExit(f"--rows={n} must be a multiple of --group={g}")
  config = models.ModelConfig(**arch, attention_impl="xla")
  params = models.init_params(config, jax.random.key(0))
  prompts = jnp.asarray(np.repeat(np.random.default_rng(0).integers(
      1, config.vocab_size, (n // g, p)), g, axis=0), jnp.int32)
  lens, budget = jnp.full((n,), p, jnp.int32), jnp.full((n,), r, jnp.int32)
  seeds = row_seeds(jax.random.key(0), n)
  sampling = SamplingConfig(max_new_tokens=r, length_buckets=(p,)).device_key()
  state = lambda: engine.prefill(params, prompts, lens, seeds, budget, model_config=config,
                                 capacity=p + r, group_size=g, pad_id=0)
  decode = lambda s: engine.decode(params, s, jnp.int32(p + r), model_config=config,
                                   config=sampling, pad_id=0)
  jax.block_until_ready(decode(state()))
  hlo = engine.decode.lower(params, state(), jnp.int32(p + r), model_config=config,
                            config=sampling, pad_id=0).compile().as_text()
  with tempfile.TemporaryDirectory() as trace_dir:
    states = [jax.block_until_ready(state()) for _ in range(args.calls)]
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    for s in states:
      jax.block_until_ready(decode(s))
    jax.profiler.stop_trace()
    dur, count = trace_durations(trace_dir)
  steps = args.calls * (r + 1)  # r sampling steps (+1: the loop's last, all-done check)
  kinds = op_kinds(hlo)
  by_label, ops = collections.Counter(), []
  for name, total in dur.items():
    if name not in kinds or count[name] < args.calls * r:
      continue  # per-call ops (weight slicing, draws) and profiler spans
    shape, kind = kinds[name]
    what = label(shape, kind, n, config.vocab_size, p + r)
    by_label[what] += total / steps
    ops.append(dict(op=name, shape=shape, label=what, us_per_step=total / steps))
  total = sum(by_label.values())
  print(f"decode step, {'smoke' if args.smoke else f'{n} rows, capacity {p + r}'}: "
        f"{total:.0f} us traced per step "
        f"(profiler overhead included)")
  print(f"{'what':34s} {'us/step':>8s} {'share':>7s}")
  for what, us in by_label.most_common():
    print(f"{what:34s} {us:8.1f} {us / total:7.1%}")
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(smoke=args.smoke, rows=n, capacity=p + r, steps=steps, us_per_step=total, by_label=dict(by_label),
                   ops=sorted(ops, key=lambda o: -o["us_per_step"])), f, indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
