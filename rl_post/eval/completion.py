"""Task completion rate on a fixed task set, with per-problem outcomes.

Two rates are kept apart: answer-only completion (the verifier's score is 1,
the answer read in the domain's answer format however loosely it was
written) and format-strict completion (also `format_ok`), so that learning
a format is never reported as learning the task.

The per-problem `correct` array (not just the mean) is returned so that
before/after comparisons can be paired and stratified by domain and
difficulty.
"""

from typing import Iterator, Sequence

import jax
import numpy as np

from rl_post.data import batching
from rl_post.parallel import process_data
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import ERROR_KINDS
from rl_post.sampling.sampler import SamplingConfig, generate
from rl_post.tasks.base import Task


def scored_batches(model_config, params, tokenizer, tasks: Sequence[Task], *,
                   sampling: SamplingConfig, max_prompt_len: int, batch_size: int, rng, shard,
                   reward_pool: RewardPool) -> Iterator:
  """Generates one response per task, `batch_size` tasks per call, and scores them.

  Batches are padded to `batch_size` rows (one compiled shape); batch
  `start`'s key is `fold_in(rng, start)`.

  Yields:
    (start, tasks of the batch, response texts, the fetched rollout, the
    pool's scores) per batch, in order.
  """
  for start in range(0, len(tasks), batch_size):
    chunk = list(tasks[start:start + batch_size])
    prompts, lens = batching.encode_prompts(tokenizer, chunk, max_prompt_len)
    pad = batch_size - len(chunk)  # fixed shapes: one compilation
    prompts = np.pad(prompts, ((0, pad), (0, 0)), constant_values=tokenizer.pad_id)
    lens = np.pad(lens, (0, pad), constant_values=1)
    if shard is not None:
      prompts, lens = shard((prompts, lens))
    rollout = process_data.fetch(generate(params, prompts, lens, jax.random.fold_in(rng, start),
                                          model_config=model_config, config=sampling,
                                          eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id))
    texts = batching.decode_responses(tokenizer, rollout.tokens_BxT[:len(chunk)],
                                      rollout.mask_BxT[:len(chunk)])
    yield start, chunk, texts, rollout, reward_pool.score(chunk, texts)


def evaluate(model_config, params, tokenizer, tasks: Sequence[Task], *, sampling: SamplingConfig,
             max_prompt_len: int, batch_size: int, rng, shard=None,
             num_samples: int = 1, reward_pool: RewardPool | None = None,
             domain_options=None) -> dict:
  """Generates `num_samples` responses per task and verifies them.

  `shard`, if given, places a tree of host batch arrays on the mesh
  (e.g. `functools.partial(sharding.shard_batch, mesh=..., rules=...)`).
  Verification goes through `reward_pool` (the trainer's), so a hanging or
  crashing verifier is a counted error, not a hung or dead run; without
  one, a default RewardPool with `domain_options` is started for the call.

  Returns:
    dict with "correct" [n] bool (first sample, answer-only), "strict_correct"
    [n] bool (first sample, also strictly formatted), "num_correct" and
    "num_strict_correct" [n] int (over samples), "num_samples", "difficulty"
    [n], "domain" [n], "format_ok" [n], "response_len" [n], "reward" [n] and
    "components" {name: [n]} (the first sample's reward and its named
    components, 0 where a verdict lacks one), "completion_rate",
    "strict_completion_rate" and "errors" {kind: count over all samples}.
  """
  tasks = list(tasks)
  if not tasks:
    raise ValueError("evaluate needs at least one task")
  if batch_size < 1 or num_samples < 1:  # an empty range of batches would score 0% silently
    raise ValueError(f"evaluate needs batch_size >= 1 and num_samples >= 1, got "
                     f"{batch_size} and {num_samples}")
  if reward_pool is None:
    with RewardPool(domain_options=domain_options) as pool:
      return evaluate(model_config, params, tokenizer, tasks, sampling=sampling,
                      max_prompt_len=max_prompt_len, batch_size=batch_size, rng=rng,
                      shard=shard, num_samples=num_samples, reward_pool=pool)
  n = len(tasks)
  num_correct = np.zeros(n, np.int64)
  num_strict = np.zeros(n, np.int64)
  first_correct = np.zeros(n, bool)
  first_strict = np.zeros(n, bool)
  format_ok = np.zeros(n, bool)
  response_len = np.zeros(n, np.int64)
  reward = np.zeros(n, np.float32)
  components: dict[str, np.ndarray] = {}
  errors = dict.fromkeys(ERROR_KINDS, 0)
  for sample in range(num_samples):
    for start, chunk, _, rollout, scored in scored_batches(
        model_config, params, tokenizer, tasks, sampling=sampling, max_prompt_len=max_prompt_len,
        batch_size=batch_size, rng=jax.random.fold_in(rng, sample), shard=shard,
        reward_pool=reward_pool):
      ok = scored.correct_N
      strict = ok & np.array([v.format_ok for v in scored.verdicts], bool)
      for kind, count in scored.error_counts.items():
        errors[kind] += count
      idx = slice(start, start + len(chunk))
      num_correct[idx] += ok
      num_strict[idx] += strict
      if sample == 0:
        first_correct[idx] = ok
        first_strict[idx] = strict
        format_ok[idx] = [v.format_ok for v in scored.verdicts]
        response_len[idx] = rollout.response_lens_B[:len(chunk)]
        reward[idx] = scored.rewards_N
        for name, values in scored.components.items():
          components.setdefault(name, np.zeros(n, np.float32))[idx] = values
  return {
      "correct": first_correct, "strict_correct": first_strict, "num_correct": num_correct,
      "num_strict_correct": num_strict, "num_samples": num_samples,
      "difficulty": np.array([t.difficulty for t in tasks]),
      "domain": [t.domain for t in tasks], "format_ok": format_ok,
      "response_len": response_len, "reward": reward, "components": components,
      "completion_rate": float(first_correct.mean()),
      "strict_completion_rate": float(first_strict.mean()),
      "errors": errors,
  }


def eval_metrics(result: dict, prefix: str = "eval") -> dict[str, float]:
  """Flat metrics: overall, per domain and per difficulty completion rates.

  `pass_rate` is answer-only completion; `strict_pass_rate` also needs the
  strict format (results without "strict_correct" report answer-only only).
  """
  correct = result["correct"]
  strict = result.get("strict_correct")
  metrics = {f"{prefix}/pass_rate": float(correct.mean()),
             f"{prefix}/format_rate": float(result["format_ok"].mean())}
  if strict is not None:
    metrics[f"{prefix}/strict_pass_rate"] = float(np.mean(strict))
  for kind, count in result.get("errors", {}).items():
    metrics[f"{prefix}/errors/{kind}"] = float(count)
  domains = np.array(result["domain"])
  for domain in sorted(set(result["domain"])):
    sel = domains == domain
    metrics[f"{prefix}/{domain}/pass_rate"] = float(correct[sel].mean())
    if strict is not None:
      metrics[f"{prefix}/{domain}/strict_pass_rate"] = float(np.asarray(strict)[sel].mean())
    for level in sorted(set(result["difficulty"][sel].tolist())):
      sub = sel & (result["difficulty"] == level)
      metrics[f"{prefix}/{domain}/difficulty_{level}/pass_rate"] = float(correct[sub].mean())
  return metrics
