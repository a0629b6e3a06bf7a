r"""Side by side: TRL's GRPOTrainer (PyTorch) vs rl_post's GRPO trainer, one run, one core.

  bash experiments/benchmarks/setup_baselines.sh trl        # once: /work/envs/trl
  PYTHONPATH=. python experiments/benchmarks/vs_trl.py       # table + results/vs_trl.json
  PYTHONPATH=. python experiments/benchmarks/vs_trl.py --smoke --baselines=none --out=/tmp/v.json
  PYTHONPATH=. python experiments/benchmarks/vs_trl.py --cold_warm  # results/vs_trl_cold_warm.json

Both sides start from the same weights (an SFT export made here, or a fresh
init with --sft_steps=0; the TRL side loads the HF copy written by
`rl_post.models.hf.save`), use the same SentencePiece tokenizer (the TRL side
wraps it: trl_sp_tokenizer.py), the same training prompts in the same order
(B per step, each x G), the same verifier and reward weights (imported from
rl_post on the TRL side), the same lengths, learning rate (`--learning_rate`,
constant, AdamW, same betas/eps, grad clip), beta, clip range, loss
aggregation and number of steps, and one CPU thread each on the same core: XLA single-threaded here,
torch.set_num_threads(1) there, both pinned with sched_setaffinity/taskset.
The TRL side runs as a subprocess in its own environment (never imported by
rl_post). Reported: seconds per step (the median, so the steps where ours
compiles -- the first, and the first of each new shared-prefix length -- are
apart; `total_s` counts every step), rollout tokens/s and greedy held-out
completion after the last step. Times are wall seconds on a shared machine:
the load average is recorded.

`--cold_warm` runs our side twice more, each in a fresh process (so nothing
is compiled in memory yet) with the persistent compilation cache
(rl_post/training/compile_cache.py) in a new empty directory: "cold" builds
every program, "warm" loads them from what cold wrote. Its table gives each
run's first step, all steps (compiles included), its setup and the whole
process; the in-process row is left out (the SFT start compiled some of its
programs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import grpo_arithmetic, sft_arithmetic  # noqa: E402
from experiments.benchmarks.baselines import (LOSS_TYPES, BaselineEnvMissing,  # noqa: E402
                                              baseline_python, comparison_table, compile_steps,
                                              env_python, step_summary)
from rl_post import models  # noqa: E402
from rl_post.checkpoint.params import load_params, save_params  # noqa: E402
from rl_post.config_sections import from_section  # noqa: E402
from rl_post.data import batching, build_tokenizer  # noqa: E402
from rl_post.data import eval_sets  # noqa: E402
from rl_post.data.mixture import TaskConfig  # noqa: E402
from rl_post.metrics.writers import read_metrics  # noqa: E402
from rl_post.models import hf  # noqa: E402
from rl_post.rl import config as rl_config  # noqa: E402
from rl_post.rl import trainer  # noqa: E402
from rl_post.sft import trainer as sft_trainer  # noqa: E402
from rl_post.metrics import compiles  # noqa: E402
from rl_post.training import compile_cache, host_memory  # noqa: E402
from rl_post.training.optimizer import OptimizerConfig  # noqa: E402
from rl_post.training.run import model_config_from  # noqa: E402

RESULTS = os.path.join(HERE, "results", "vs_trl.json")
COLD_WARM_RESULTS = os.path.join(HERE, "results", "vs_trl_cold_warm.json")


def bench_config(args, workdir: str):
  """configs/grpo_arithmetic.py (":tiny" with --smoke) sized for the comparison."""
  c = grpo_arithmetic.get_config("tiny" if args.smoke else "")
  c.tokenizer.path = os.path.join(workdir, "tokenizer", "arithmetic.model")
  if args.smoke:
    c.tokenizer.corpus_examples = 2000
  c.model.attention_impl = "xla"
  c.rl.update(num_steps=args.steps, batch_size=args.prompts, num_generations=args.group,
              max_new_tokens=args.response, eval_every=0, checkpoint_every=args.steps)
  c.rl.grpo.kl_coef = args.beta
  c.optimizer.learning_rate = args.learning_rate
  # The same maths, less work (docs/algorithms.md): the leading tokens a group's rows share
  # (the 9-15 token prompt, often the answer's first tokens too) through the update's layers
  # once, and log-prob chunks of 16 (of 32, a 48-wide update's first chunk is 17 positions
  # of padding).
  c.rl.update(shared_prefix=True, logprob_chunk=16)
  c.rewards.num_workers = 0  # verify in-process, as the TRL side does
  if args.precision == "bf16":  # bf16 compute over f32 weights; TRL: bf16=True (autocast)
    c.rl.compute_dtype = "bfloat16"
  c.tasks.heldout_size = args.heldout
  c.seed = args.seed
  return c


def initial_export(c, workdir: str, sft_steps: int, smoke: bool):
  """Tokenizer, then the starting weights both sides share: (export_dir, tokenizer)."""
  tokenizer = build_tokenizer.build(c)
  export = os.path.join(workdir, "init")
  if sft_steps:
    sft = sft_arithmetic.get_config("tiny" if smoke else "")
    sft.tokenizer, sft.model, sft.seed = c.tokenizer, c.model, c.seed
    sft.sft.update(num_steps=sft_steps, checkpoint_every=sft_steps)
    sft.optimizer.update(total_steps=sft_steps, warmup_steps=min(sft.optimizer.warmup_steps,
                                                                  sft_steps // 2))
    sft_trainer.train(sft, os.path.join(workdir, "sft"))
    return os.path.join(workdir, "sft", sft_trainer.EXPORT_DIR), tokenizer
  model_config = model_config_from(c, tokenizer)
  save_params(export, model_config, models.init_params(model_config, jax.random.key(c.seed)))
  return export, tokenizer


def trl_spec(c, export: str, tokenizer, workdir: str) -> dict:
  """What trl_side.py needs: HF weights, tokenizer, tasks in step order, hparams."""
  rl = rl_config.load(c.rl)
  opt = from_section(OptimizerConfig, c.optimizer, "optimizer")
  if opt.schedule != "constant" or opt.warmup_steps:
    raise ValueError("vs_trl compares constant learning rates without warmup")
  model_config = model_config_from(c, tokenizer)
  params = load_params(export, models.abstract_params(model_config))
  hf_dir = hf.save(os.path.join(workdir, "hf_init"), model_config, params,
                   extra_config=dict(bos_token_id=tokenizer.bos_id,
                                     eos_token_id=tokenizer.eos_id,
                                     pad_token_id=tokenizer.pad_id))
  mixture = eval_sets.make_mixture(from_section(TaskConfig, c.tasks, "tasks"), int(c.seed))
  tasks = [t for it in range(rl.num_steps) for t in mixture.sample(it, rl.batch_size)]
  probe = tasks[:2]  # the TRL side checks its token ids and logits against ours on these
  ids = [batching.prompt_ids(tokenizer, t.prompt) for t in probe]
  logits = [np.asarray(models.apply(model_config, params, jnp.asarray([row])))[0].tolist()
            for row in ids]
  as_dict = lambda t: dict(task_id=t.task_id, domain=t.domain, prompt=t.prompt,
                           difficulty=t.difficulty, target=t.target, metadata=dict(t.metadata))
  return dict(
      repo_root=ROOT, hf_dir=hf_dir, tokenizer_model=c.tokenizer.path, seed=int(c.seed),
      workdir=os.path.join(workdir, "trl"), train_tasks=[as_dict(t) for t in tasks],
      heldout_tasks=[as_dict(t) for t in mixture.heldout], probe_ids=ids, probe_logits=logits,
      domain_options=c.tasks.domain_options.to_dict(), reward_weights=c.rewards.weights.to_dict(),
      hparams=dict(num_steps=rl.num_steps, batch_size=rl.batch_size,
                   num_generations=rl.num_generations, max_new_tokens=rl.max_new_tokens,
                   temperature=rl.temperature, learning_rate=opt.learning_rate,
                   weight_decay=opt.weight_decay, max_grad_norm=opt.grad_clip_norm,
                   adam_b1=opt.b1, adam_b2=opt.b2, adam_eps=opt.eps, beta=rl.algo.kl_coef,
                   clip_low=rl.algo.clip_low, clip_high=rl.algo.clip_high,
                   loss_type=LOSS_TYPES[rl.algo.aggregation],
                   bf16=rl.compute_dtype == "bfloat16"))


def cpu_marks_of_writes(marks: list):
  """Patches the trainer's MetricWriter to note this process's CPU seconds at each
  step's write (XLA runs single-threaded here); returns the undo function."""
  original = trainer.MetricWriter.write

  def write(self, step, metrics):
    marks.append(time.process_time())
    return original(self, step, metrics)

  trainer.MetricWriter.write = write
  return lambda: setattr(trainer.MetricWriter, "write", original)


def run_ours(c, export: str, workdir: str, run_dir: str = "ours") -> dict:
  c.rl.init_from = export
  # the update's time in time/train_s, not in the next rollout's (one core: nothing to overlap)
  c.rl.metrics_one_step_late = False
  marks = [time.process_time()]
  undo = cpu_marks_of_writes(marks)
  try:
    trainer.train(c, os.path.join(workdir, run_dir))
  finally:
    undo()
  rows = [r for r in read_metrics(os.path.join(workdir, run_dir)) if "time/step_s" in r]
  rollout_s = [r["time/rollout_s"] for r in rows]
  tokens = [r["throughput/rollout_tokens_per_s"] * r["time/rollout_s"] for r in rows]
  step_cpu = [b - a for a, b in zip(marks, marks[1:])]  # the last one includes the eval
  return dict(system="rl_post (JAX)", **step_summary([r["time/step_s"] for r in rows], rollout_s,
                                                     tokens),
              total_s=sum(r["time/step_s"] for r in rows), compile_steps=compile_steps(rows),
              setup_s=rows[0].get("time/setup_s", 0.0),
              programs=int(sum(r.get("compile/programs", 0) for r in rows)),
              compile_s=sum(r.get("time/compile_s", 0.0) for r in rows),
              # groups whose G rewards differ: the only ones with a gradient (0: nothing learned)
              informative_group_frac=statistics.fmean(1.0 - r["groups/zero_std_frac"]
                                                      for r in rows),
              cpu_s_per_step=statistics.median(step_cpu[1:-1] or step_cpu), step_cpu_s=step_cpu,
              time_split_s={k: statistics.median([r[f"time/{k}_s"] for r in rows[1:] or rows])
                            for k in ("rollout", "reward", "train")},
              heldout_pass_rate=rows[-1]["eval/pass_rate"], heldout_tasks=c.tasks.heldout_size,
              reward_mean=[r["reward/mean"] for r in rows], versions={"jax": jax.__version__})


def run_trl(python: str, spec_path: str, workdir: str, core: int, malloc: str = "system") -> dict:
  out = os.path.join(workdir, "trl_out.json")
  env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
  if malloc == "retain":
    env["GLIBC_TUNABLES"] = host_memory.glibc_tunables()
  proc = subprocess.run(["taskset", "-c", str(core), python, os.path.join(HERE, "trl_side.py"),
                         f"--spec={spec_path}", f"--out={out}"], check=False, env=env)
  if proc.returncode:
    raise RuntimeError(f"the TRL side failed (exit {proc.returncode}); its output is above")
  with open(out) as f:
    r = json.load(f)
  if not r["prompt_ids_equal"] or r["logit_max_diff"] > 1e-3:
    raise RuntimeError(f"the TRL side does not see our model: prompt ids equal "
                       f"{r['prompt_ids_equal']}, max logit difference {r['logit_max_diff']}")
  return dict(system=r["system"], **step_summary(r["step_wall_s"], r["rollout_s"],
                                                 r["rollout_tokens"]),
              total_s=sum(r["step_wall_s"]),
              cpu_s_per_step=statistics.median(r["step_cpu_s"][1:] or r["step_cpu_s"]),
              heldout_pass_rate=r["eval"]["pass_rate"], heldout_tasks=r["eval"]["num_tasks"],
              reward_mean=r["reward_mean"], step_cpu_s=r["step_cpu_s"], versions=r["versions"],
              torch_threads=r["torch_threads"], malloc=malloc,
              prompt_ids_equal=r["prompt_ids_equal"],
              logit_max_diff=r["logit_max_diff"])


CACHE_MODES = ("cold", "warm")
_CHILD_FLAGS = ("steps", "prompts", "group", "response", "beta", "learning_rate", "precision",
                "heldout", "seed", "workdir")


def run_ours_cached(args, export: str) -> dict:
  """This process's part of --cold_warm: our side with the compilation cache in
  `args.compile_cache_dir`, its row with the cache's hits and the process's wall time."""
  start = time.perf_counter()
  hits = []
  jax.monitoring.register_event_listener(
      lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
  compile_cache.enable(args.compile_cache_dir)
  before, _ = compiles.totals()
  c = bench_config(args, os.path.abspath(args.workdir))
  row = run_ours(c, export, os.path.abspath(args.workdir), args.ours_dir)
  row.update(system=f"rl_post (JAX, {args.cache_mode} cache)", cache=args.cache_mode,
             cache_hits=len(hits), process_programs=compiles.totals()[0] - before,
             process_s=time.perf_counter() - start)
  return row


def cold_and_warm(args, export: str) -> list[dict]:
  """Our side in two fresh processes sharing a new, empty compilation cache."""
  rows = []
  cache_dir = os.path.join(os.path.abspath(args.workdir), "compile_cache")
  os.makedirs(cache_dir, exist_ok=False)  # the workdir is new: the cache starts empty
  for mode in CACHE_MODES:
    out = os.path.join(os.path.abspath(args.workdir), f"ours_{mode}.json")
    cmd = [sys.executable, os.path.abspath(__file__), *(f"--{k}={getattr(args, k)}"
                                                      for k in _CHILD_FLAGS),
           *(["--smoke"] if args.smoke else []), f"--ours_only={export}",
           f"--ours_dir=ours_{mode}", f"--cache_mode={mode}", f"--compile_cache_dir={cache_dir}",
           f"--out={out}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=False, env=dict(os.environ, PYTHONPATH=ROOT))
    if proc.returncode:
      raise RuntimeError(f"our {mode}-cache run failed (exit {proc.returncode}); its output is "
                         "above")
    with open(out) as f:
      rows.append(dict(json.load(f), launch_s=time.perf_counter() - start))
  return rows


def cache_table(rows: list[dict]) -> str:
  """First step and all steps (compiles included) per run; ours with its setup,
  programs built, cache hits and whole process."""
  w = max(18, *(len(r["system"]) + 1 for r in rows))
  head = (f"{'system':<{w}}{'first step s':>13}{'all steps s':>12}{'setup s':>9}"
          f"{'process s':>11}{'programs':>10}{'cache hits':>11}")
  lines = [head, "-" * len(head)]
  for r in rows:
    extra = "".join(f"{r[k]:>{n}{f}}" if k in r else f"{'-':>{n}}" for k, n, f in (
        ("setup_s", 9, ".1f"), ("process_s", 11, ".1f"), ("programs", 10, "d"),
        ("cache_hits", 11, "d")))
    lines.append(f"{r['system']:<{w}}{r['first_step_s']:>13.2f}{r['total_s']:>12.1f}{extra}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true", help="tiny model and sizes (tests)")
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--prompts", type=int, default=8, help="B, prompts per step")
  parser.add_argument("--group", type=int, default=4, help="G, generations per prompt")
  parser.add_argument("--response", type=int, default=32, help="max new tokens")
  parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient (both sides)")
  parser.add_argument("--learning_rate", type=float, default=2e-5,
                      help="both sides' constant learning rate (configs/grpo_arithmetic.py has "
                      "2e-4, which costs both sides 4-23 points of held-out completion in 30 "
                      "steps from the 300-step start; at 2e-5 neither side loses)")
  parser.add_argument("--precision", default="f32", choices=("f32", "bf16"),
                      help="bf16: mixed precision on both sides (ours rl.compute_dtype=bfloat16, "
                      "TRL bf16=True), f32 weights and optimizer state")
  parser.add_argument("--heldout", type=int, default=256)
  parser.add_argument("--seed", type=int, default=0,
                      help="the start (SFT), the tasks and both sides' sampling; the held-out set "
                      "is drawn from it too")
  parser.add_argument("--sft_steps", type=int, default=300,
                      help="SFT steps of the shared start (300: 43%% held-out completion at 32 "
                      "tokens and groups that still differ; 600: as many complete, but nearly "
                      "every group's rewards are equal, so little is learned; 120: 2-4%%); "
                      "0: a fresh init")
  parser.add_argument("--baselines", default="trl", choices=("trl", "none"))
  parser.add_argument("--trl_python", default=env_python("trl"))
  parser.add_argument("--trl_malloc", default="system", choices=("system", "retain", "both"),
                      help="TRL's glibc malloc: as installed, with our host memory settings "
                      "(GLIBC_TUNABLES), or one run of each")
  parser.add_argument("--core", type=int, default=None, help="CPU to pin to (default: last)")
  parser.add_argument("--workdir", default="/tmp/rl_post/vs_trl", help="must be new or empty")
  parser.add_argument("--out", default=None,
                      help=f"default {RESULTS} ({COLD_WARM_RESULTS} with --cold_warm)")
  parser.add_argument("--cold_warm", action="store_true",
                      help="our side in two fresh processes: a new, empty compilation cache "
                      "(cold), then the same one (warm); see the module docstring")
  # --cold_warm's child processes (internal)
  parser.add_argument("--ours_only", default="", help=argparse.SUPPRESS)
  parser.add_argument("--ours_dir", default="ours", help=argparse.SUPPRESS)
  parser.add_argument("--cache_mode", default="cold", choices=CACHE_MODES, help=argparse.SUPPRESS)
  parser.add_argument("--compile_cache_dir", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.out = args.out or (COLD_WARM_RESULTS if args.cold_warm else RESULTS)
  malloc = host_memory.apply_policy()  # as every rl_post entry point does (cli.run)
  if args.ours_only:
    row = run_ours_cached(args, args.ours_only)
    with open(args.out, "w") as f:
      json.dump(row, f, indent=1)
    return row
  python = baseline_python(args.trl_python, "trl") if args.baselines == "trl" else None
  core = max(os.sched_getaffinity(0)) if args.core is None else args.core
  os.sched_setaffinity(0, {core})
  workdir = os.path.abspath(args.workdir)
  if os.path.exists(workdir) and os.listdir(workdir):
    raise ValueError(f"{workdir} holds an earlier run (its SFT and RL would resume): "
                     "remove it or pass a fresh --workdir")
  load_before = os.getloadavg()
  c = bench_config(args, workdir)
  export, tokenizer = initial_export(c, workdir, args.sft_steps, args.smoke)
  spec = trl_spec(c, export, tokenizer, workdir)
  spec_path = os.path.join(workdir, "trl_spec.json")
  with open(spec_path, "w") as f:
    json.dump(spec, f)
  rows = cold_and_warm(args, export) if args.cold_warm else [run_ours(c, export, workdir)]
  ours = rows[0]["system"]
  if python:
    for malloc_mode in (("system", "retain") if args.trl_malloc == "both" else (args.trl_malloc,)):
      rows.append(run_trl(python, spec_path, workdir, core, malloc_mode))
      if malloc_mode == "retain":
        rows[-1]["system"] += " (retain malloc)"
  print(f"\ncore {core}; load avg before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
        f"{spec['hparams']}")
  print(comparison_table(rows, ours))
  print("all steps, compiles included: " + ", ".join(f"{r['system']} {r['total_s']:.1f} s"
                                                     for r in rows))
  print(f"ours: {100 * rows[0]['informative_group_frac']:.0f}% of groups had rewards that "
        "differ (the others give no gradient)")
  if args.cold_warm:
    print(cache_table(rows))
  for step in rows[0]["compile_steps"]:
    print(f"ours compiled another update at step {step['step']} ({step['s']:.1f} s): shared "
          f"prefix {step['shared_prefix_len']:.0f}, width {step['update_width']:.0f}")
  trl = [r for r in rows if not r["system"].startswith("rl_post")]
  result = dict(core=core, load_avg_before=load_before, load_avg_after=os.getloadavg(),
                smoke=args.smoke, sft_steps=args.sft_steps, seed=args.seed, host_malloc=malloc,
                hparams=spec["hparams"],
                model=model_config_from(c, tokenizer).to_dict(), rows=rows,
                cold_warm=args.cold_warm,
                trl_over_ours=(trl[0]["s_per_step"] / rows[0]["s_per_step"] if trl else None))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {args.out}")
  return result


if __name__ == "__main__":
  try:
    main()
  except BaselineEnvMissing as e:
    print(f"vs_trl: {e}", file=sys.stderr)
    sys.exit(2)
