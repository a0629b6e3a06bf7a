"""TRL's GRPOTrainer on the run vs_trl.py or vs_trl_smollm2.py describes: the baseline side.

  /work/envs/trl/bin/python experiments/benchmarks/trl_side.py --spec=SPEC.json --out=OUT.json

Runs in the TRL environment (experiments/benchmarks/setup_baselines.sh),
never in the library's; the benchmark starts it pinned to its cores, with
OMP_NUM_THREADS torch threads (1 if unset). The spec (written by the
benchmark) names the HF copy of our initial weights, the tokenizer (our
SentencePiece model, or a tokenizer.json dir with a chat template: then the
prompts are conversational, an optional system turn and the task as the user
turn), the training tasks in step order (B per step), the held-out tasks and
every hyperparameter. Rewards come from our verifiers for any registered
domain (rl_post.tasks, pure Python + numpy; reasoning-gym for rg/...),
scored and weighted by our RewardPool in process. Writes per-step wall and
CPU seconds, rollout tokens and seconds, reward seconds, the task ids it was
rewarded on and greedy held-out completion; with `eval_only` in the spec,
only the held-out completion of the initial weights.
"""

import os
import pickle
import sys
import time

import torch

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 1))
torch.set_num_interop_threads(1)

import datasets  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_io  # noqa: E402
from trl_sp_tokenizer import OurSentencePiece  # noqa: E402


def our_scoring(repo_root: str, domain_options: dict, weights: dict):
  """(tasks_from_dicts, score): our verifiers and reward weights, through our RewardPool
  in this process (rewards.num_workers=0), for the tasks' registered domains."""
  sys.path.insert(0, repo_root)
  from rl_post.rewards.pool import RewardPool  # noqa: PLC0415
  from rl_post.rewards.scoring import RewardConfig  # noqa: PLC0415
  from rl_post.tasks.base import Task  # noqa: PLC0415
  pool = RewardPool(RewardConfig(weights=weights, num_workers=0), domain_options)

  def to_tasks(dicts):
    return [Task(**d) for d in dicts]

  return to_tasks, pool.score


def load_tasks(spec: dict, to_tasks) -> tuple[list, list]:
  """(training tasks in step order, held-out tasks): pickled Task objects, or dicts."""
  if "tasks_pickle" in spec:  # written by the benchmark: our Task objects, exactly
    with open(spec["tasks_pickle"], "rb") as f:
      tasks = pickle.load(f)
    return tasks["train"], tasks["heldout"]
  return to_tasks(spec["train_tasks"]), to_tasks(spec["heldout_tasks"])


def load_tokenizer(spec: dict):
  if "tokenizer_dir" in spec:
    return transformers.AutoTokenizer.from_pretrained(spec["tokenizer_dir"])
  return OurSentencePiece(spec["tokenizer_model"])


def chat(spec: dict) -> bool:
  return "tokenizer_dir" in spec


def prompt_of(spec: dict, task):
  """The dataset's prompt: conversational (system turn + the task) or the plain text."""
  if not chat(spec):
    return task.prompt + "\n"
  system = spec.get("system_prompt") or ""
  return ([{"role": "system", "content": system}] if system else []) + [
      {"role": "user", "content": task.prompt}]


def prompt_ids(spec: dict, tokenizer, tasks) -> list[list[int]]:
  """The ids GRPOTrainer generates from (its own `_tokenize_prompts` calls)."""
  prompts = [prompt_of(spec, t) for t in tasks]
  if chat(spec):
    return [list(ids) for ids in tokenizer.apply_chat_template(
        conversation=prompts, add_generation_prompt=True, tokenize=True,
        return_dict=True)["input_ids"]]
  return tokenizer(text=prompts)["input_ids"]


def completion_text(completion) -> str:
  """A conversational completion ([{"role": "assistant", "content": ...}]) or plain text."""
  return completion if isinstance(completion, str) else completion[-1]["content"]


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


def left_padded(ids: list[list[int]], pad_id: int) -> dict:
  """input_ids and attention_mask, left-padded, as GRPOTrainer pads prompts."""
  width = max(len(row) for row in ids)
  return {"input_ids": torch.tensor([[pad_id] * (width - len(r)) + r for r in ids]),
          "attention_mask": torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids])}


def greedy_completion(model, tokenizer, tasks, score, max_new_tokens: int, batch: int,
                      spec: dict) -> dict:
  """Greedy held-out completion rate (answer-only), scored by our verifiers; per problem too."""
  model.eval()
  correct, lengths = [], []
  for i in range(0, len(tasks), batch):
    chunk = tasks[i:i + batch]
    enc = left_padded(prompt_ids(spec, tokenizer, chunk), tokenizer.pad_token_id)
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
          "mean_len": sum(lengths) / max(len(lengths), 1), "correct": correct,
          "domains": [t.domain for t in tasks]}


def same_model(model, tokenizer, tasks, ids: list, logits: list,
               spec: dict | None = None) -> tuple[bool, float]:
  """(our prompt ids == the ones GRPOTrainer builds, max |logit difference|) on the probe
  tasks; `logits` holds each probe's last rows (all of them, or a few for a large vocabulary)."""
  same_ids = prompt_ids(spec or {}, tokenizer, tasks) == ids
  with torch.no_grad():
    diff = max(float((model(torch.tensor([row])).logits[0, -len(ref):] - torch.tensor(ref))
                     .abs().max()) for row, ref in zip(ids, logits))
  return same_ids, diff


def grpo_args(spec: dict, output_dir: str) -> trl.GRPOConfig:
  """GRPOConfig with the spec's hyperparameters; `grad_accum` micro-batches per step, the
  B x G completions generated at once (one generation batch per optimizer step)."""
  h = spec["hparams"]
  accum = h.get("grad_accum", 1)
  rows = h["batch_size"] * h["num_generations"]
  if rows % accum:
    raise ValueError(f"B x G = {rows} rows do not split into {accum} micro-batches")
  return trl.GRPOConfig(
      output_dir=output_dir, per_device_train_batch_size=rows // accum,
      gradient_accumulation_steps=accum, num_generations=h["num_generations"],
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


def versions() -> dict:
  return {"trl": trl.__version__, "torch": torch.__version__,
          "transformers": transformers.__version__}


def main(argv=None):
  spec, out = side_io.read_spec(__doc__.splitlines()[0], argv)
  h = spec["hparams"]
  to_tasks, score = our_scoring(spec["repo_root"], spec["domain_options"], spec["reward_weights"])
  train_tasks, heldout = load_tasks(spec, to_tasks)
  tokenizer = load_tokenizer(spec)
  model = transformers.AutoModelForCausalLM.from_pretrained(spec["hf_dir"], dtype=torch.float32)
  if spec.get("eval_only"):  # the initial weights' held-out completion, nothing trained
    start = time.perf_counter()
    evaluation = greedy_completion(model, tokenizer, heldout, score, h["max_new_tokens"],
                                   h["batch_size"] * h["num_generations"], spec)
    side_io.write_result(out, dict(system="TRL GRPOTrainer", versions=versions(),
                                   eval=evaluation, eval_s=time.perf_counter() - start))
    return
  checks_start = time.perf_counter()  # the benchmark's checks, not TRL's startup
  same_ids, logit_diff = same_model(model, tokenizer, train_tasks[:len(spec["probe_ids"])],
                                    spec["probe_ids"], spec["probe_logits"], spec)
  fixed = spec.get("fixed_texts", [])
  fixed_rewards = score([train_tasks[f["task_index"]] for f in fixed],
                        [f["text"] for f in fixed]).rewards_N.tolist() if fixed else []
  checks_s = time.perf_counter() - checks_start
  dataset = datasets.Dataset.from_dict({"prompt": [prompt_of(spec, t) for t in train_tasks],
                                        "task_index": list(range(len(train_tasks)))})
  rewarded, reward_s = [], []  # the task ids of every rewarded completion, in order

  def reward(prompts, completions, task_index, **kwargs):
    start = time.perf_counter()
    tasks = [train_tasks[i] for i in task_index]
    rewarded.extend(t.task_id for t in tasks)
    out = score(tasks, [completion_text(c) for c in completions]).rewards_N.tolist()
    reward_s.append(time.perf_counter() - start)
    return out

  torch.manual_seed(spec["seed"])
  trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=grpo_args(spec, spec["workdir"]),
                            train_dataset=dataset, processing_class=tokenizer)
  train_start = time.time()
  steps, rollouts, train_s = train_timed(trainer)
  train_end = time.time()
  logs = [r for r in trainer.state.log_history if "reward" in r]
  start = time.perf_counter()
  evaluation = greedy_completion(trainer.model, tokenizer, heldout, score, h["max_new_tokens"],
                                 h["batch_size"] * h["num_generations"], spec)
  rollout_s = [s for s, _ in rollouts]
  result = dict(
      system="TRL GRPOTrainer", versions=versions(),
      torch_threads=torch.get_num_threads(), prompt_ids_equal=same_ids, logit_max_diff=logit_diff,
      step_wall_s=steps.wall, step_cpu_s=steps.cpu,
      rollout_s=rollout_s, rollout_tokens=[n for _, n in rollouts], reward_s=reward_s,
      update_s=[w - r - g for w, r, g in zip(steps.wall, rollout_s, reward_s)],
      loss=[r.get("loss") for r in logs], reward_mean=[r["reward"] for r in logs],
      trained_task_ids=rewarded, fixed_text_rewards=fixed_rewards, checks_s=checks_s,
      train_start_unix=train_start, train_end_unix=train_end, train_s=train_s, eval=evaluation,
      eval_s=time.perf_counter() - start)
  side_io.write_result(out, result)


if __name__ == "__main__":
  main()
