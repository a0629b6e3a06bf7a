r"""SmolLM2-135M GRPO steps with LoRA adapters against full fine-tuning: peak RSS and
the update's seconds, both measured in the same run, on the same cores.

  PYTHONPATH=. python experiments/benchmarks/lora_step.py            # rank 16, all projections
  PYTHONPATH=. python experiments/benchmarks/lora_step.py --rank=8 --targets=q_proj,v_proj
  PYTHONPATH=. python experiments/benchmarks/lora_step.py --settings=full,lora_int8,lora_nf4
  PYTHONPATH=. python experiments/benchmarks/lora_step.py --grad_accum=4   # the recipe's micro-batches
  PYTHONPATH=. python experiments/benchmarks/lora_step.py --grad_accum=4 \
      --rollout_precision=bfloat16   # bf16 sampler weights in every setting
  PYTHONPATH=. python experiments/benchmarks/lora_step.py --smoke --out=/tmp/l.json

Each setting runs `experiments/train_rl.py --config=configs/smollm2_135m_grpo.py`
(8 prompts x 8, `--new_tokens` new tokens, the update in `--grad_accum`
micro-batches: one by default, four in the recipe) for
`--steps` steps in a child process, without held-out evaluation and without a
compilation cache, as `smollm2_step.py` does: peak RSS from the kernel
(`os.wait4`), per-step times from the run's metrics.jsonl. "full" trains every
param (AdamW moments for all of them); "lora" sets `rl.lora.rank`, so only the
adapters train and the frozen base is also the KL reference; "lora_int8" also
keeps that base int8 (`rl.lora.base_quant`, QLoRA int8), "lora_nf4" 4-bit NF4
in blocks of `--block_size` (`rl.lora.base_quant_block_size`). `--smoke` runs
the config's `tiny` variant for 2 steps. `--rollout_precision` sets
`rl.rollout_precision` in every setting (the sampler's weights; the masters
stay f32). Prints a table and writes
experiments/benchmarks/results/lora_step.json with the CPU. Timings move with
the CPU and with anything else running on it.
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from experiments.benchmarks import child_runs, smollm2_step  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate", "up", "down")
SETTINGS = ("full", "lora", "lora_int8", "lora_nf4")


def lora_flags(setting: str, rank: int, alpha: float, targets: tuple[str, ...],
               block_size: int = 64) -> list[str]:
  """The train_rl.py overrides of one setting ("full": none)."""
  if setting == "full":
    return []
  flags = [f"--config.rl.lora.rank={rank}", f"--config.rl.lora.alpha={alpha}"]
  if tuple(targets) != TARGETS:  # the section's default is every projection
    flags.append(f"--config.rl.lora.targets=({','.join(repr(t) for t in targets)},)")
  if setting == "lora_int8":
    flags.append("--config.rl.lora.base_quant=int8")
  if setting == "lora_nf4":
    flags += ["--config.rl.lora.base_quant=nf4",
              f"--config.rl.lora.base_quant_block_size={block_size}"]
  return flags


def run_setting(name: str, flags: list[str], new_tokens: int, steps: int, smoke: bool,
                workdir: str, grad_accum: int = 1) -> dict:
  """One child training run (smollm2_step's runner with the setting's flags)."""
  extra = [] if smoke else [f"--config.rl.max_new_tokens={new_tokens}",
                            f"--config.rl.grad_accum={grad_accum}"]
  result = smollm2_step.run_child(extra + flags, steps, smoke, workdir)
  return dict(result, name=name, flags=flags, new_tokens=new_tokens, grad_accum=grad_accum)


def later_mean(setting: dict, key: str) -> float:
  """Mean of `key` over the steps after the first (which compiles)."""
  later = setting["steps"][1:]
  return sum(r[key] for r in later) / len(later) if later else float("nan")


def table(settings: list[dict]) -> str:
  lines = [f"{'setting':>9} {'peak RSS GiB':>12} {'update s (later)':>16} "
           f"{'step s (later)':>14} {'first step s':>12}"]
  for s in settings:
    lines.append(f"{s['name']:>9} {s['peak_rss_gib']:>12.2f} {later_mean(s, 'update_s'):>16.2f} "
                 f"{later_mean(s, 'step_s'):>14.2f} {s['steps'][0]['step_s']:>12.1f}")
  full = next((s for s in settings if s["name"] == "full"), None)
  for s in settings:
    if full and s is not full:
      lines.append(f"{s['name']} / full: peak RSS "
                   f"{s['peak_rss_gib'] / full['peak_rss_gib']:.2f}x, update "
                   f"{later_mean(s, 'update_s') / later_mean(full, 'update_s'):.2f}x")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--new_tokens", type=int, default=128, help="rl.max_new_tokens")
  parser.add_argument("--rank", type=int, default=16, help="LoRA rank r (> 0)")
  parser.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha")
  parser.add_argument("--block_size", type=int, default=64,
                      help="4-bit block length for lora_nf4 (divides 576, 64 and 1536)")
  parser.add_argument("--targets", default=",".join(TARGETS),
                      help="comma-separated projections that get adapters")
  parser.add_argument("--settings", default=",".join(SETTINGS),
                      help=f"comma-separated settings, from {SETTINGS}")
  parser.add_argument("--steps", type=int, default=3, help="RL steps per setting (>= 2)")
  parser.add_argument("--grad_accum", type=int, default=1,
                      help="rl.grad_accum: micro-batches of the update (divides 64 rows)")
  parser.add_argument("--rollout_precision", default="float32",
                      choices=("float32", "bfloat16", "int8"),
                      help="rl.rollout_precision of every setting (the sampler's weights)")
  parser.add_argument("--smoke", action="store_true", help="the config's tiny variant, 2 steps")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "lora_step.json"))
  args = parser.parse_args(argv)
  targets = tuple(t for t in args.targets.split(",") if t)
  if args.rank < 1:
    parser.error(f"--rank must be >= 1, got {args.rank}")
  if not targets or set(targets) - set(TARGETS):
    parser.error(f"--targets must name some of {TARGETS}, got {args.targets!r}")
  if args.grad_accum < 1 or 64 % args.grad_accum:
    parser.error(f"--grad_accum must divide the 64 rows of a step, got {args.grad_accum}")
  if args.steps < 2:
    parser.error("--steps must be >= 2 (the first step against later ones)")
  names = tuple(s for s in args.settings.split(",") if s)
  if not names or set(names) - set(SETTINGS) or len(set(names)) != len(names):
    parser.error(f"--settings must name some of {SETTINGS} once each, got {args.settings!r}")
  steps = 2 if args.smoke else args.steps
  settings = []
  for name in names:
    with tempfile.TemporaryDirectory() as workdir:
      flags = lora_flags(name, args.rank, args.alpha, targets, args.block_size)
      if args.rollout_precision != "float32":
        flags.append(f"--config.rl.rollout_precision={args.rollout_precision}")
      settings.append(run_setting(name, flags,
                                  args.new_tokens, steps, args.smoke, workdir,
                                  args.grad_accum))
  cpu = host_cpu.describe()
  result = dict(config=smollm2_step.CONFIG + (":tiny" if args.smoke else ""), smoke=args.smoke,
                rank=args.rank, alpha=args.alpha, targets=targets, block_size=args.block_size,
                grad_accum=args.grad_accum, rollout_precision=args.rollout_precision,
                cpu=cpu, settings=settings)
  return child_runs.write_result(args.out, result, table(settings))


if __name__ == "__main__":
  main()
