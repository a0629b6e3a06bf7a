"""TRL's GRPOTrainer on the run vs_trl.py describes: the baseline side.

  /work/envs/trl/bin/python experiments/benchmarks/trl_side.py --spec=SPEC.json --out=OUT.json

Runs in the TRL environment (experiments/benchmarks/setup_baselines.sh),
never in the library's; vs_trl.py starts it pinned to one core. The spec
(written by vs_trl.py) names the HF copy of our initial weights, our
SentencePiece model, the training tasks in step order (B per step), the
held-out tasks and every hyperparameter. Rewards come from our verifier,
imported from rl_post.tasks / rl_post.rewards (pure Python + numpy), scored
and weighted exactly as our reward pool does. Writes per-step wall and CPU
seconds, rollout tokens and seconds, and greedy held-out completion.
"""

import os
import sys
import time

import torch

torch.set_num_threads(1)
torch.set_num_interop_threads(1)

import datasets  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_io  # noqa: E402
from trl_sp_tokenizer import OurSentencePiece  # noqa: E402


def our_scoring(repo_root: str, domain_options: dict, weights: dict):
  """(tasks_from_dicts, score) with our Arithmetic verifier and reward weights."""
  sys.path.insert(0, repo_root)
  from rl_post.rewards import verdicts as verdicts_lib  # noqa: PLC0415
  from rl_post.rewards.scoring import RewardConfig, combine  # noqa: PLC0415
  from rl_post.tasks.arithmetic import Arithmetic  # noqa: PLC0415
  from rl_post.tasks.base import Task  # noqa: PLC0415
  domain = Arithmetic(**domain_options.get("arithmetic", {}))
  config = RewardConfig(weights=weights, num_workers=0)

  def to_tasks(dicts):
    for d in dicts:
      if d["domain"] != domain.name:
        raise ValueError(f"trl_side verifies the arithmetic domain only, got {d['domain']!r}")
    return [Task(**d) for d in dicts]

  def score(tasks, completions):
    raw = []
    for offset, count in verdicts_lib.units(domain, len(tasks)):
      raw += verdicts_lib.verify_unit(domain, tasks[offset:offset + count],
                                      completions[offset:offset + count], None)
    checked = [verdicts_lib.checked(r) for r in raw]
    return combine(tasks, [v for v, _ in checked], [k for _, k in checked], config)

  return to_tasks, score


class StepTimes(transformers.TrainerCallback):
  """Wall and CPU seconds of every optimizer step (generation included)."""

  def __init__(self):
    self.wall, self.cpu = [], []

  def on_step_begin(self, args, state, control, **kwargs):
    self._t = (time.perf_counter(), time.process_time())

  def on_step_end(self, args, state, control, **kwargs):
    self.wall.append(time.perf_counter() - self._t[0])
    self.cpu.append(time.process_time() - self._t[1])


def time_rollouts(trainer, log: list):
  """Wraps the trainer's generation: (seconds, completion tokens incl. EOS) per call."""
  inner = trainer._generate_single_turn

  def timed(*args, **kwargs):
    start = time.perf_counter()
    completion_ids, logprobs = inner(*args, **kwargs)
    log.append((time.perf_counter() - start, sum(len(c) for c in completion_ids)))
    return completion_ids, logprobs

  trainer._generate_single_turn = timed


def train_timed(trainer) -> tuple[StepTimes, list, float]:
  """Runs `trainer.train()`; returns its per-step times, its rollouts and the total seconds."""
  steps, rollouts = StepTimes(), []
  trainer.add_callback(steps)
  time_rollouts(trainer, rollouts)
  start = time.perf_counter()
  trainer.train()
  return steps, rollouts, time.perf_counter() - start


def greedy_completion(model, tokenizer, tasks, score, max_new_tokens: int, batch: int) -> dict:
  """Greedy held-out completion rate, scored by our verifier."""
  model.eval()
  correct, lengths = [], []
  for i in range(0, len(tasks), batch):
    chunk = tasks[i:i + batch]
    enc = tokenizer(text=[t.prompt + "\n" for t in chunk], padding=True, padding_side="left",
                    return_tensors="pt")
    with torch.no_grad():
      out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                           eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.pad_token_id)
    texts = []
    for row in out[:, enc["input_ids"].shape[1]:].tolist():
      if tokenizer.eos_token_id in row:
        row = row[:row.index(tokenizer.eos_token_id) + 1]
      lengths.append(len(row))
      texts.append(tokenizer.decode(row, skip_special_tokens=True))
    correct += score(chunk, texts).correct_N.tolist()
  return {"pass_rate": sum(correct) / max(len(correct), 1), "num_tasks": len(correct),
          "mean_len": sum(lengths) / max(len(lengths), 1)}


def same_model(model, tokenizer, tasks, ids: list, logits: list) -> tuple[bool, float]:
  """(our prompt ids == this tokenizer's, max |logit difference|) on the probe tasks."""
  same_ids = [tokenizer(text=t.prompt + "\n")["input_ids"] for t in tasks] == ids
  with torch.no_grad():
    diff = max(float((model(torch.tensor([row])).logits[0] - torch.tensor(ref)).abs().max())
               for row, ref in zip(ids, logits))
  return same_ids, diff


def grpo_args(spec: dict, output_dir: str) -> trl.GRPOConfig:
  h = spec["hparams"]
  return trl.GRPOConfig(
      output_dir=output_dir, per_device_train_batch_size=h["batch_size"] * h["num_generations"],
      gradient_accumulation_steps=1, num_generations=h["num_generations"],
      max_completion_length=h["max_new_tokens"], temperature=h["temperature"], top_p=1.0,
      top_k=0, learning_rate=h["learning_rate"], lr_scheduler_type="constant", warmup_steps=0,
      weight_decay=h["weight_decay"], max_grad_norm=h["max_grad_norm"],
      adam_beta1=h["adam_b1"], adam_beta2=h["adam_b2"], adam_epsilon=h["adam_eps"],
      beta=h["beta"], epsilon=h["clip_low"], epsilon_high=h["clip_high"],
      loss_type=h["loss_type"], scale_rewards="group", num_iterations=1,
      max_steps=h["num_steps"], shuffle_dataset=False, gradient_checkpointing=False,
      bf16=bool(h.get("bf16", False)), fp16=False, use_cpu=True, logging_steps=1, report_to="none",
      save_strategy="no", seed=spec["seed"], disable_tqdm=True, dataloader_num_workers=0,
      remove_unused_columns=False)


def main(argv=None):
  spec, out = side_io.read_spec(__doc__.splitlines()[0], argv)
  h = spec["hparams"]
  to_tasks, score = our_scoring(spec["repo_root"], spec["domain_options"], spec["reward_weights"])
  train_tasks, heldout = to_tasks(spec["train_tasks"]), to_tasks(spec["heldout_tasks"])
  tokenizer = OurSentencePiece(spec["tokenizer_model"])
  model = transformers.AutoModelForCausalLM.from_pretrained(spec["hf_dir"], dtype=torch.float32)
  same_ids, logit_diff = same_model(model, tokenizer, train_tasks[:len(spec["probe_ids"])],
                                    spec["probe_ids"], spec["probe_logits"])
  dataset = datasets.Dataset.from_dict({"prompt": [t.prompt + "\n" for t in train_tasks],
                                        "task_index": list(range(len(train_tasks)))})

  def reward(prompts, completions, task_index, **kwargs):
    return score([train_tasks[i] for i in task_index], list(completions)).rewards_N.tolist()

  torch.manual_seed(spec["seed"])
  trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=grpo_args(spec, spec["workdir"]),
                            train_dataset=dataset, processing_class=tokenizer)
  steps, rollouts, train_s = train_timed(trainer)
  logs = [r for r in trainer.state.log_history if "reward" in r]
  start = time.perf_counter()
  evaluation = greedy_completion(trainer.model, tokenizer, heldout, score, h["max_new_tokens"],
                                 h["batch_size"] * h["num_generations"])
  result = dict(
      system="TRL GRPOTrainer", versions={"trl": trl.__version__, "torch": torch.__version__,
                                          "transformers": transformers.__version__},
      torch_threads=torch.get_num_threads(), prompt_ids_equal=same_ids, logit_max_diff=logit_diff,
      step_wall_s=steps.wall, step_cpu_s=steps.cpu,
      rollout_s=[s for s, _ in rollouts], rollout_tokens=[n for _, n in rollouts],
      reward_mean=[r["reward"] for r in logs], train_s=train_s, eval=evaluation,
      eval_s=time.perf_counter() - start)
  side_io.write_result(out, result)


if __name__ == "__main__":
  main()
