r"""SFT steps of the demo's data one demonstration per row vs packed (`sft.packing`), one core.

  PYTHONPATH=. taskset -c 1 python experiments/benchmarks/sft_packing.py
  PYTHONPATH=. python experiments/benchmarks/sft_packing.py --smoke --out=/tmp/p.json

The demo's SFT stage (`configs/demo.py`: 4 layers, width 128, 32
demonstrations of arithmetic, countdown and sql per step, rows of 176
tokens) with a tokenizer built the demo's way into a temporary folder.
Both variants train from the same initial state on the same steps of the
demonstration stream (`rl_post.sft.trainer.demonstration_batch`), called in
turns for `--rounds` rounds of `--steps` steps each (so the machine's
drift hits both alike); the median seconds per step are reported with the
demonstrations trained per second, the mean rows per batch (packed: as
many as first fit needs, a multiple of `--row_multiple`) and the share of
the rows' tokens that are demonstration tokens. Both variants drop only
demonstrations longer than a row (none in the demo's mix). Writes a table
and experiments/benchmarks/results/sft_packing.json.
"""

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from configs import demo  # noqa: E402
from rl_post.config_sections import from_section  # noqa: E402
from rl_post.data import build_tokenizer  # noqa: E402
from rl_post.data.mixture import TaskConfig, TaskMixture  # noqa: E402
from rl_post.parallel import mesh as mesh_lib  # noqa: E402
from rl_post.sft.trainer import SFTConfig, demonstration_batch, make_sft_loss  # noqa: E402
from rl_post.training import state as state_lib  # noqa: E402
from rl_post.training.optimizer import OptimizerConfig, make_optimizer  # noqa: E402
from rl_post.training.run import model_config_from  # noqa: E402
from rl_post.training.step import make_train_step  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "sft_packing.json")


def run(config, steps: int, rounds: int, row_multiple: int) -> dict:
  with tempfile.TemporaryDirectory() as tmp:
    config.tokenizer.path = os.path.join(tmp, "demo.model")
    tokenizer = build_tokenizer.build(config)
  model_config = model_config_from(config, tokenizer)
  mixture = TaskMixture(from_section(TaskConfig, config.tasks, "tasks"), int(config.seed))
  padded = from_section(SFTConfig, config.sft, "sft")
  packed = dataclasses.replace(padded, packing=True, pack_row_multiple=row_multiple)
  optimizer = make_optimizer(from_section(OptimizerConfig, config.sft_optimizer, "sft_optimizer"))
  mesh = mesh_lib.make_mesh(dict(config.mesh))
  rules = tuple(tuple(r) for r in config.sharding_rules)
  step_fn = jax.jit(make_train_step(make_sft_loss(model_config), optimizer))
  variants = {"one per row": padded, "packed": packed}
  states = {name: state_lib.create_train_state(model_config, optimizer, mesh, rules,
                                               jax.random.key(0)) for name in variants}
  batches = {name: [demonstration_batch(mixture, tokenizer, s, sft) for s in range(steps)]
             for name, sft in variants.items()}
  times = {name: [] for name in variants}
  for name in variants:  # compile every batch shape (packed: a few row counts) and warm up
    shapes = {}
    for batch, _ in batches[name]:
      shapes.setdefault(batch["tokens"].shape, batch)
    for batch in shapes.values():
      states[name], metrics = step_fn(states[name], batch)
    jax.block_until_ready(metrics)
  for _ in range(rounds):
    for name in variants:
      start = time.perf_counter()
      for batch, _ in batches[name]:
        states[name], metrics = step_fn(states[name], batch)
      jax.block_until_ready(metrics)
      times[name].append((time.perf_counter() - start) / steps)
  rows = []
  for name, sft in variants.items():
    dropped = sum(d for _, d in batches[name])
    demo_tokens = sum(int((b["tokens"] != tokenizer.pad_id).sum()) for b, _ in batches[name])
    s_per_step = statistics.median(times[name])
    num_rows = [b["tokens"].shape[0] for b, _ in batches[name]]
    rows.append(dict(variant=name, rows=float(np.mean(num_rows)), max_len=sft.max_len,
                     s_per_step=s_per_step,
                     demos_per_s=(sft.batch_size * steps - dropped) / steps / s_per_step,
                     dropped_frac=dropped / (sft.batch_size * steps),
                     fill=demo_tokens / (sum(num_rows) * sft.max_len)))
  return dict(rows=rows, steps=steps, rounds=rounds, batch_size=padded.batch_size)


def table(result: dict) -> str:
  lines = [f"{'variant':<12} {'rows':>5} {'s/step':>8} {'demos/s':>8} {'dropped':>8} {'fill':>6}"]
  for r in result["rows"]:
    lines.append(f"{r['variant']:<12} {r['rows']:>5.1f} {r['s_per_step']:>8.3f} "
                 f"{r['demos_per_s']:>8.1f} {100 * r['dropped_frac']:>7.1f}% "
                 f"{100 * r['fill']:>5.1f}%")
  base, packed = result["rows"]
  lines.append(f"packed / one per row: {base['s_per_step'] / packed['s_per_step']:.2f}x faster "
               f"per step, {packed['demos_per_s'] / base['demos_per_s']:.2f}x demonstrations/s")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--row_multiple", type=int, default=4)
  parser.add_argument("--smoke", action="store_true", help="demo:tiny, 2 steps x 1 round")
  parser.add_argument("--out", default=RESULTS)
  args = parser.parse_args(argv)
  config = demo.get_config("tiny" if args.smoke else "")
  steps, rounds = (2, 1) if args.smoke else (args.steps, args.rounds)
  result = run(config, steps, rounds, args.row_multiple)
  result.update(machine=dict(cpu_count=os.cpu_count(), jax=jax.__version__,
                             affinity=sorted(os.sched_getaffinity(0))),
                command=" ".join(sys.argv))
  print(table(result))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
