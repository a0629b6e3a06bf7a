r"""Reward pool throughput: completions/s through worker processes vs in-process.

Arithmetic tasks, half answered with the demonstration and half with a
wrong answer, scored by `RewardPool.score` (pipe protocol, per-item time
budget, verdict checks on the trusted side) with 1, 2 and 4 workers, and
by the same pool with num_workers=0 (verification in this process, no
isolation) as the baseline, in the same run. Best of --repeats per row.

  python experiments/benchmarks/reward_pool.py
  python experiments/benchmarks/reward_pool.py --items=64 --repeats=1 --workers=1  # smoke
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from rl_post.rewards.pool import RewardPool  # noqa: E402
from rl_post.rewards.scoring import RewardConfig  # noqa: E402
from rl_post.tasks import registry  # noqa: E402

_ITEMS = flags.DEFINE_integer("items", 1024, "Completions per scored batch.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed batches per row (best is kept).")
_WORKERS = flags.DEFINE_list("workers", ["1", "2", "4"], "Worker counts to measure.")
_OUT = flags.DEFINE_string(
    "out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                        "reward_pool.json"), "JSON output path.")


def make_batch(n: int, seed: int = 0):
  domain = registry.make_domain("arithmetic")
  rng = np.random.default_rng(seed)
  tasks = [domain.generate(rng, 1 + i % len(domain.difficulty_levels)) for i in range(n)]
  texts = [domain.demonstration(t) if i % 2 == 0 else "<think>x</think><answer>-1</answer>"
           for i, t in enumerate(tasks)]
  return tasks, texts


def measure(num_workers: int, tasks, texts, repeats: int) -> dict:
  with RewardPool(RewardConfig(num_workers=num_workers)) as pool:
    pool.score(tasks[:8], texts[:8])  # warm: domains built, imports done
    best, batch = float("inf"), None
    for _ in range(repeats):
      start = time.perf_counter()
      batch = pool.score(tasks, texts)
      best = min(best, time.perf_counter() - start)
  return {"workers": num_workers, "items": len(tasks), "seconds": best,
          "items_per_s": len(tasks) / best, "us_per_item": 1e6 * best / len(tasks),
          "pass_rate": float(batch.correct_N.mean()), "errors": batch.errors}


def main(argv):
  del argv
  tasks, texts = make_batch(_ITEMS.value)
  rows = [dict(measure(0, tasks, texts, _REPEATS.value), system="in-process (baseline)")]
  for k in map(int, _WORKERS.value):
    rows.append(dict(measure(k, tasks, texts, _REPEATS.value), system=f"pool, {k} workers"))
  base = rows[0]["items_per_s"]
  print(f"{_ITEMS.value} arithmetic completions per batch, {os.cpu_count()} CPUs, "
        f"best of {_REPEATS.value}\n")
  print("| system | items/s | us/item | vs in-process | pass rate | errors |\n|---|---|---|---|---|---|")
  for r in rows:
    r["vs_in_process"] = r["items_per_s"] / base
    print(f"| {r['system']} | {r['items_per_s']:.0f} | {r['us_per_item']:.1f} | "
          f"{r['vs_in_process']:.2f}x | {r['pass_rate']:.2f} | {r['errors']} |")
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump({"items": _ITEMS.value, "repeats": _REPEATS.value, "cpus": os.cpu_count(),
               "rows": rows}, f, indent=1)
  print(f"\nwrote {_OUT.value}")


if __name__ == "__main__":
  app.run(main)
