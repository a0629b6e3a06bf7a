r"""The synchronous RL loop against rollouts overlapped with the update
(`rl.overlap_update`, k = 1), on the same workload, in the same run, on the same cores.

  PYTHONPATH=. python experiments/benchmarks/overlap_step.py          # SmolLM2-135M, 6 steps
  PYTHONPATH=. python experiments/benchmarks/overlap_step.py --cpus=1 --steps=8
  PYTHONPATH=. python experiments/benchmarks/overlap_step.py --smoke --out=/tmp/o.json

Each variant runs `experiments/train_rl.py` in a child process, one after the
other, every child pinned to the same cores (`--cpus`, default: every core
this process may use; the children inherit the affinity), without held-out
evaluation and without a compilation cache (experiments/benchmarks/child_runs.py).
The workload is `configs/smollm2_135m_grpo.py:quick` cut to 4 prompts x 4
generations of up to 128 new tokens with the update in one batch, so that
generation and update take comparable time on a CPU; the only checkpoint is
at the last step, so every step after the first overlaps in the second
variant. `--smoke` runs `configs/grpo_arithmetic.py:tiny` (a 2-layer model,
its tokenizer built first in a child) for 3 steps. Both loops run on the one
CPU device of the process, which runs programs in dispatch order: what the
overlapped loop can save is the host's work hidden behind the update
(docs/algorithms.md, "Rollouts overlapped with the update"); what it costs
is the sampler's params copy.

Columns (means over the steps after the first, which compiles):
  s/step      wall-clock per step: from the end of step 1 to the end of the
              last step, over the steps between (the run's time/mean_step_s)
  rollout s   time/rollout_s: generation; overlapped, it runs beside the update
  update s    time/train_s: the update's dispatch and the wait for it;
              overlapped, only the part the next rollout's launch did not hide
  handover s  time/handover_s: the copy of the params the sampler keeps
  staleness   async/staleness: policy versions between sampling and update
  sampler GiB overlap/sampler_params_gib: that copy, held while the update runs
  peak RSS    the child's, from the kernel (`os.wait4`)
Prints the table and writes experiments/benchmarks/results/overlap_step.json
with the CPU. Timings move with the CPU and with anything else running on it.
"""

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from experiments.benchmarks import child_runs  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402

CONFIG = "configs/smollm2_135m_grpo.py:quick"
WORKLOAD = ["--config.rl.batch_size=4", "--config.rl.num_generations=4",
            "--config.rl.max_new_tokens=128", "--config.rl.grad_accum=1"]
SMOKE_CONFIG = "configs/grpo_arithmetic.py:tiny"
SMOKE_STEPS = 3
VARIANTS = (("sync (baseline)", []), ("overlap, k=1", ["--config.rl.overlap_update=True"]))
MEANS = {"rollout_s": "time/rollout_s", "update_s": "time/train_s",
         "handover_s": "time/handover_s", "staleness": "async/staleness",
         "sampler_gib": "overlap/sampler_params_gib"}


def parse_cpus(text: str) -> set[int]:
  """"0-3,6" -> {0, 1, 2, 3, 6}."""
  cpus = set()
  for part in text.split(","):
    lo, _, hi = part.partition("-")
    cpus.update(range(int(lo), int(hi or lo) + 1))
  return cpus


def summary(name: str, run: dict) -> dict:
  """A variant's row from its child run (`child_runs.run_entry_point`)."""
  steps = run["metrics"]
  later = steps[1:] or steps
  mean = lambda key: sum(float(m.get(key, 0.0)) for m in later) / len(later)
  return dict(variant=name, steps=len(steps), s_per_step=float(steps[-1]["time/mean_step_s"]),
              **{k: mean(key) for k, key in MEANS.items()},
              first_step_s=float(steps[0]["time/step_s"]), wall_s=run["wall_s"],
              peak_rss_gib=run["peak_rss_gib"])


def table(rows: list[dict]) -> str:
  lines = [f"| {'variant':<16} | s/step | rollout s | update s | handover s | staleness | "
           f"sampler GiB | peak RSS GiB | vs sync |",
           f"|{'-' * 18}|--------|-----------|----------|------------|-----------|"
           f"-------------|--------------|---------|"]
  for r in rows:
    lines.append(f"| {r['variant']:<16} | {r['s_per_step']:6.2f} | {r['rollout_s']:9.2f} | "
                 f"{r['update_s']:8.2f} | {r['handover_s']:10.3f} | {r['staleness']:9.2f} | "
                 f"{r['sampler_gib']:11.3f} | {r['peak_rss_gib']:12.2f} | "
                 f"{r['s_per_step'] / rows[0]['s_per_step']:6.2f}x |")
  return "\n".join(lines)


def _smoke_tokenizer(tmp: str) -> list[str]:
  """Builds the tiny config's tokenizer in a child; the flag that points a run at it."""
  path = os.path.join(tmp, "tok.model")
  subprocess.run([sys.executable, "experiments/build_tokenizer.py", f"--config={SMOKE_CONFIG}",
                  f"--config.tokenizer.path={path}", "--config.tokenizer.corpus_examples=2000"],
                 cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True,
                 capture_output=True)
  return [f"--config.tokenizer.path={path}"]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=6, help="RL steps per variant (>= 3)")
  parser.add_argument("--cpus", default="", help='cores every child runs on, e.g. "0-1" '
                      "(default: those this process may use)")
  parser.add_argument("--smoke", action="store_true",
                      help=f"{SMOKE_CONFIG} for {SMOKE_STEPS} steps")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "overlap_step.json"))
  args = parser.parse_args(argv)
  if args.steps < 3:
    parser.error("--steps must be >= 3 (the first step compiles; the second is the first "
                 "overlapped one)")
  try:
    cpus = parse_cpus(args.cpus) if args.cpus else os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)  # the children inherit it
  except (ValueError, OSError) as e:
    parser.error(f"--cpus {args.cpus!r}: {e}")
  steps = SMOKE_STEPS if args.smoke else args.steps
  config = SMOKE_CONFIG if args.smoke else CONFIG
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    workload = _smoke_tokenizer(tmp) if args.smoke else WORKLOAD
    for name, flags in VARIANTS:
      workdir = os.path.join(tmp, f"run{len(rows)}")
      run = child_runs.run_entry_point(
          ["experiments/train_rl.py", f"--config={config}", f"--workdir={workdir}",
           f"--config.rl.num_steps={steps}", f"--config.rl.checkpoint_every={steps}",
           "--config.tasks.heldout_size=0", "--config.rl.eval_every=0"] + workload + flags,
          workdir)
      rows.append(dict(summary(name, run), flags=flags))
  result = dict(config=config, workload=[] if args.smoke else workload, steps=steps,
                cpus=sorted(cpus), smoke=args.smoke, cpu=host_cpu.describe(), rows=rows)
  return child_runs.write_result(args.out, result, table(rows))


if __name__ == "__main__":
  main()
