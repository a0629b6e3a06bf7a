"""Rejection-sampling fine-tuning (RFT) data: a model's own verified samples.

The fair control for RL from a pretrained model: it sees the same tasks and
the same number of samples as an RL run, uses no gold demonstrations, and
trains only on what the model itself got right. `collect` draws the RL
run's task batches (`tasks`, seed, train stream: steps 0 .. rl.num_steps-1,
rl.batch_size prompts each), samples rl.num_generations responses per
prompt at rl.temperature from the checkpoint (B*G*num_steps samples, the RL
run's budget), verifies them in a RewardPool and writes the correct ones
(score 1; one copy of each distinct response per task) as the JSONL that
`sft.dataset` reads.

    stats = collect(config, "SmolLM2.gguf", "/tmp/rft/samples.jsonl")
    # then: train_sft.py --config.sft.dataset=/tmp/rft/samples.jsonl
"""

import collections
import json
import os

import jax
import numpy as np

from rl_post.data.mixture import TaskMixture
from rl_post.eval import completion
from rl_post.evaluate import checkpoint_eval
from rl_post.parallel import sharding
from rl_post.rewards.pool import RewardPool
from rl_post.rl.components import rl_sections
from rl_post.sampling.sampler import SamplingConfig

RFT_STREAM = 0x4F7  # the samples' own rng stream


def collect(config, checkpoint: str, out_path: str, *, batch_size: int = 0) -> dict:
  """Samples the RL run's budget from `checkpoint`, keeps the verified responses.

  Args:
    config: an RL config (rl, tasks, rewards, tokenizer sections).
    checkpoint: anything `rl_post.evaluate.checkpoint_eval` loads (.gguf, HF, export, workdir).
    out_path: the JSONL written ({"prompt", "response", "task_id", "domain",
      "difficulty"} per line).
    batch_size: responses per generate call (0: rl.batch_size * rl.num_generations).

  Returns:
    {"samples", "correct", "kept", "per_domain": {domain: {"samples", "correct"}},
     "errors": {kind: count}, "path"}.
  """
  sections = rl_sections(config)
  rl, tasks_config = sections["rl"], sections["tasks"]
  tokenizer, mesh, rules, loaded = checkpoint_eval.load_for_eval(config, checkpoint)
  mixture = TaskMixture(tasks_config, int(config.seed))
  shard = lambda tree: sharding.shard_batch(tree, mesh=mesh, rules=rules)
  sampling = SamplingConfig(rl.max_new_tokens, rl.temperature)
  rng = jax.random.fold_in(jax.random.key(int(config.seed)), RFT_STREAM)
  domain_options = config.tasks.get("domain_options")
  domain_options = domain_options.to_dict() if hasattr(domain_options, "to_dict") else {}
  per_domain = collections.defaultdict(lambda: {"samples": 0, "correct": 0})
  errors = collections.Counter()
  kept, seen = [], set()
  with RewardPool(sections["rewards"], domain_options) as pool:
    for step in range(rl.num_steps):
      tasks = [t for t in mixture.sample(step, rl.batch_size) for _ in range(rl.num_generations)]
      for _, chunk, texts, _, scored in completion.scored_batches(
          loaded.model_config, loaded.params, tokenizer, tasks, sampling=sampling,
          max_prompt_len=rl.max_prompt_len, batch_size=batch_size or len(tasks),
          rng=jax.random.fold_in(rng, step), shard=shard, reward_pool=pool):
        errors.update(scored.error_counts)
        for task, text, correct in zip(chunk, texts, np.asarray(scored.correct_N)):
          per_domain[task.domain]["samples"] += 1
          per_domain[task.domain]["correct"] += int(correct)
          if correct and (task.task_id, text) not in seen:
            seen.add((task.task_id, text))
            kept.append({"prompt": task.prompt, "response": text, "task_id": task.task_id,
                         "domain": task.domain, "difficulty": task.difficulty})
  os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
  with open(out_path, "w", encoding="utf-8") as f:
    for record in kept:
      f.write(json.dumps(record) + "\n")
  samples = sum(d["samples"] for d in per_domain.values())
  return {"samples": samples, "correct": sum(d["correct"] for d in per_domain.values()),
          "kept": len(kept), "per_domain": dict(per_domain), "errors": dict(errors),
          "path": os.path.abspath(out_path)}
