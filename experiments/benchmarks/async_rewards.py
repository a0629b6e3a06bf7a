r"""Sync vs async rewards: seconds per RL step when verification is slow.

The tiny GRPO config (configs/grpo_arithmetic.py "tiny", 4 prompts x G=4)
with a verifier that sleeps --verify_ms per completion in one reward worker
process (a stand-in for a code domain's sandboxed test runs), trained for
--steps steps synchronously (the baseline) and with `rl.async_rewards` at
staleness 1 and 2, in the same run. Mean seconds per step exclude the first
3 steps (compilation, and the async pipeline's first fill, whose rewards are
scored during compilation); `reward wait` is the time the loop blocked on
rewards plus the reference forward. With --deadline_s, one more row runs
the synchronous loop with `rewards.batch_timeout_s` at that value: a
verifier slower than the deadline costs a step the deadline, and the
completions it did not reach are counted (`deadline timeouts` per step).

  python experiments/benchmarks/async_rewards.py
  python experiments/benchmarks/async_rewards.py --verify_ms=500 --deadline_s=2  # + deadline row
  python experiments/benchmarks/async_rewards.py --steps=2 --verify_ms=1 --staleness=1  # smoke
  python experiments/benchmarks/async_rewards.py --steps=2 --verify_ms=300 --staleness= \
      --deadline_s=1  # smoke of the deadline row
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402


_STEPS = flags.DEFINE_integer("steps", 16, "RL steps per row.")
_VERIFY_MS = flags.DEFINE_integer("verify_ms", 10, "Verifier time per completion.")
_STALENESS = flags.DEFINE_list("staleness", ["1", "2"], "Async staleness bounds to measure.")
_DEADLINE_S = flags.DEFINE_float("deadline_s", 0.0,
                                 "rewards.batch_timeout_s of an extra sync row; 0: no such row.")
_OUT = flags.DEFINE_string(
    "out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                        "async_rewards.json"), "JSON output path.")

WARMUP_STEPS = 3  # compile, and the pipeline's first fill (its rewards overlap the compile)
DOMAIN = "slow_verifier:SlowDigit"  # imported by name in the reward worker


def _config(tokenizer_path: str, staleness: int | None, deadline_s: float = 0.0):
  from configs import grpo_arithmetic
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DOMAIN,), difficulties=(1,),
                 domain_options={DOMAIN: {"verify_ms": _VERIFY_MS.value}}, heldout_size=0)
  c.rl.update(max_prompt_len=24, max_new_tokens=8, batch_size=4, num_generations=4,
              num_steps=_STEPS.value, checkpoint_every=1000, eval_every=0)
  c.rewards.update(num_workers=1, batch_timeout_s=deadline_s)
  if staleness is not None:
    c.rl.update(async_rewards=True, async_staleness=staleness)
  return c


def _row(name: str, workdir: str) -> dict:
  from rl_post.metrics.writers import read_metrics
  rows = read_metrics(workdir)
  timed = rows[WARMUP_STEPS:] or rows[1:] or rows
  return {"variant": name, "steps": len(rows),
          "s_per_step": float(np.mean([m["time/step_s"] for m in timed])),
          "reward_wait_s": float(np.mean([m["time/reward_s"] for m in timed])),
          "mean_staleness": float(np.mean([m.get("async/staleness", 0.0) for m in timed])),
          "deadline_timeouts": float(np.mean([m["reward/deadline_timeouts"] for m in timed]))}


def main(argv):
  del argv
  from configs import base
  from rl_post.data import build_tokenizer
  from rl_post.rl import trainer
  with tempfile.TemporaryDirectory() as tmp:
    tok_config = base.get_base()
    tok_config.tokenizer.path = os.path.join(tmp, "tok.model")
    tok_config.tokenizer.corpus_examples = 2000
    tok = build_tokenizer.build(tok_config).model_path
    variants = [("sync (baseline)", None, 0.0)] + [(f"async, staleness {s}", int(s), 0.0)
                                                   for s in _STALENESS.value]
    if _DEADLINE_S.value:
      variants.append((f"sync, deadline {_DEADLINE_S.value:g} s", None, _DEADLINE_S.value))
    rows = []
    for name, staleness, deadline_s in variants:
      workdir = os.path.join(tmp, f"run{len(rows)}")
      trainer.train(_config(tok, staleness, deadline_s), workdir)
      rows.append(_row(name, workdir))
  base_s = rows[0]["s_per_step"]
  for r in rows:
    r["speedup_vs_sync"] = base_s / r["s_per_step"]
  print(f"verifier {_VERIFY_MS.value} ms/completion, 16 completions/step, 1 worker, "
        f"{_STEPS.value} steps (first {WARMUP_STEPS} excluded)")
  print(f"| {'variant':<22} | s/step | reward wait s | staleness | speedup | deadline timeouts |")
  print(f"|{'-' * 24}|--------|---------------|-----------|---------|-------------------|")
  for r in rows:
    print(f"| {r['variant']:<22} | {r['s_per_step']:6.3f} | {r['reward_wait_s']:13.3f} | "
          f"{r['mean_staleness']:9.2f} | {r['speedup_vs_sync']:6.2f}x | "
          f"{r['deadline_timeouts']:17.1f} |")
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump({"verify_ms": _VERIFY_MS.value, "steps": _STEPS.value, "rows": rows}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
