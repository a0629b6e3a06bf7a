"""The episode loop on the rollout engine: generate, run tools, append, continue.

  result = run_episodes(params, envs, tasks, tokenizer=tok, model_config=mc,
                        sampling=SamplingConfig(max_new_tokens=512, ...),
                        sandbox=sb, rng=key, config=EpisodeConfig(max_turns=6))
  result.rollout        # tokens / logp / mask / loss_mask, as for single-turn RL
  result.rewards_B      # each env's verifier on its end state

Each turn: every active row generates until `</tool_call>` (a stop string
added to the sampling config), EOS or the per-turn budget; the turn's text
goes to its env; the tool calls of all rows that made one run in one
`Sandbox.run_many`; each tool response is tokenized as plain text (special
tokens off, `protocol.text_encoder`) and appended with
`sampler.extend` (mask 1, loss mask 0, no behaviour log-prob), which
resumes generation for exactly those rows. A row ends when its turn has no
tool call, it submits, it reaches `max_turns`, or its next tool response
would not fit in its budget: `sampling.max_new_tokens` is the total token
budget of each row's response (model turns plus tool responses), and a
turn's budget is `turn_tokens` cut to what is left of it (`turn_budgets`).

Tools run while no row generates (the engine decodes a batch in lockstep),
so time is split between generation and tools; the metrics record both.

On several processes every process runs this loop over the whole batch
(generation is one SPMD program over the global mesh) and each runs the
tools and the final verification of its own rows only, on its own sandbox
(`rl_post.envs.process_rows`): the step results and the scores are
all-gathered, so every process gets the same result, envs' counts and
metrics.
"""

import dataclasses
import os
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.envs import process_rows, protocol, resume
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.parallel import process_data
from rl_post.sampling.sampler import Rollout, SamplingConfig, extend, generate


@dataclasses.dataclass(frozen=True)
class EpisodeConfig:
  """max_turns: model turns per episode; turn_tokens: sampling budget per turn."""
  max_turns: int = 4
  turn_tokens: int = 64

  def __post_init__(self):
    for name in ("max_turns", "turn_tokens"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"EpisodeConfig.{name} must be an int >= 1, got {value!r}")


@dataclasses.dataclass
class EpisodeResult:
  rollout: Rollout
  rewards_B: np.ndarray
  turns_B: np.ndarray
  calls_B: np.ndarray
  context_exhausted_B: np.ndarray  # ended because a tool response did not fit
  metrics: EpisodeMetrics


def with_call_stop(sampling: SamplingConfig) -> SamplingConfig:
  if protocol.CALL_CLOSE in sampling.stop_strings:
    return sampling
  return dataclasses.replace(sampling, stop_strings=sampling.stop_strings + (protocol.CALL_CLOSE,))


def turn_budgets(prompt_lens_B, lengths_B, turn_tokens: int, max_new_tokens: int):
  """Per-row sampling budget of the next turn: `turn_tokens`, cut so that no row's
  response (model turns plus tool responses) passes `max_new_tokens`; >= 1."""
  left_B = np.asarray(prompt_lens_B) + max_new_tokens - np.asarray(lengths_B)
  return np.clip(left_B, 1, turn_tokens).astype(np.int32)


def _prompt_batch(token_lists, pad_id):
  lens = np.array([len(t) for t in token_lists], np.int32)
  if lens.min() < 1:
    raise ValueError("every prompt must encode to at least one token")
  prompts = np.full((len(token_lists), int(lens.max())), pad_id, np.int32)
  for b, toks in enumerate(token_lists):
    prompts[b, :len(toks)] = toks
  return prompts, lens


def run_episodes(params, envs: Sequence, tasks: Sequence, *, tokenizer, model_config,
                 sampling: SamplingConfig, sandbox, rng=None, seeds_B=None,
                 config: EpisodeConfig = EpisodeConfig(),
                 encode_prompt: Optional[Callable[[str], list]] = None,
                 encode_observation: Optional[Callable[[str], list]] = None,
                 metrics: Optional[EpisodeMetrics] = None,
                 checkpoint_path: Optional[str] = None) -> EpisodeResult:
  """Runs one episode per (env, task) with the model; see the module docstring.

  encode_prompt: first observation -> prompt token ids (default
  `tokenizer.encode`); encode_observation: tool response -> appended ids
  (default `protocol.text_encoder(tokenizer)`: plain text, special tokens
  off). For pretrained models pass
  `rl_post.envs.chat.chat_encoders(tokenizer)`. checkpoint_path: save the
  batch before every resume of generation and, when the file exists,
  continue from it (`rl_post.envs.resume`; one process only). `metrics`
  receives this batch's counts, every process's rows (`process_rows`).
  """
  if len(envs) != len(tasks) or not envs:
    raise ValueError(f"need one env per task, got {len(envs)} envs and {len(tasks)} tasks")
  if config.turn_tokens > sampling.max_new_tokens:
    raise ValueError(f"turn_tokens {config.turn_tokens} exceeds sampling.max_new_tokens "
                     f"{sampling.max_new_tokens} (the episode's total budget)")
  if rng is None and seeds_B is None:
    raise ValueError("pass rng or seeds_B")
  if checkpoint_path and jax.process_count() > 1:
    raise ValueError("checkpoint_path (an episode batch's resume file) runs on one process; "
                     f"this run has {jax.process_count()}")
  metrics = metrics if metrics is not None else EpisodeMetrics()
  mine = EpisodeMetrics()  # this batch, this process's rows (all rows on one process)
  encode_prompt = encode_prompt or tokenizer.encode
  encode_observation = encode_observation or protocol.text_encoder(tokenizer)
  sampling = with_call_stop(sampling)
  for env in envs:
    env.max_turns = min(env.max_turns, config.max_turns)
  common = dict(model_config=model_config, config=sampling, eos_id=tokenizer.eos_id,
                pad_id=tokenizer.pad_id, max_new_tokens=config.turn_tokens,
                detokenize=tokenizer.decode)
  batch = len(envs)
  task_ids = [t.task_id for t in tasks]
  snap = resume.load(checkpoint_path, task_ids) if checkpoint_path else None
  start = time.perf_counter()
  if snap is None:
    prompts, lens = _prompt_batch([encode_prompt(env.reset(task)) for env, task in
                                   zip(envs, tasks)], tokenizer.pad_id)
    # device arrays, the same on every process (a numpy batch reads as this process's block)
    rollout, state = generate(params, jnp.asarray(prompts), jnp.asarray(lens),
                              rng, seeds_B=seeds_B, return_state=True, **common)
    turn_start = lens.copy()
    calls, exhausted = np.zeros(batch, np.int32), np.zeros(batch, bool)
    active = list(range(batch))
  else:
    prompts, lens = snap["prompts"], snap["lens"]
    for env, saved in zip(envs, snap["envs"]):
      env.__dict__.update(saved.__dict__)
    mine.__dict__.update(snap["metrics"].__dict__)
    turn_start, calls, exhausted = snap["turn_start"], snap["calls"], snap["exhausted"]
    active = snap["pending"]
    rollout, state = resume.rebuild(params, snap, model_config=model_config, sampling=sampling,
                                    pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id,
                                    budget_B=turn_budgets(
                                        lens, resume.lengths_after_append(snap),
                                        config.turn_tokens, sampling.max_new_tokens),
                                    detokenize=tokenizer.decode)
  while active:
    tokens, lengths = process_data.fetch((state.tokens_BxT, state.lengths_B))
    mine.generation_seconds += time.perf_counter() - start
    texts = [tokenizer.decode([int(t) for t in tokens[b, turn_start[b]:lengths[b]]])
             for b in active]
    outs = process_rows.step_rows(envs, active, texts, sandbox, mine)
    rows, appended = [], []
    capacity = tokens.shape[1]
    for b, (observation, done, info) in zip(active, outs):
      calls[b] += int(info.called)
      if done:
        continue
      ids = encode_observation(observation)
      end = min(capacity, int(lens[b]) + sampling.max_new_tokens)  # the row's token budget
      if lengths[b] + len(ids) + 1 > end:
        exhausted[b] = True
        envs[b].end_out_of_context(observation)
        continue
      rows.append(b)
      appended.append(ids)
    active = rows
    if not rows:
      break
    for b, ids in zip(rows, appended):
      turn_start[b] = lengths[b] + len(ids)
    if checkpoint_path:
      resume.save(checkpoint_path, resume.snapshot_of(
          state, prompts, lens, rows, appended, envs, turn_start, calls, exhausted, mine,
          task_ids))
    start = time.perf_counter()
    after = lengths + np.bincount(rows, [len(ids) for ids in appended], batch).astype(np.int32)
    rollout, state = extend(params, state, rows, appended, **dict(
        common, max_new_tokens=turn_budgets(lens, after, config.turn_tokens,
                                            sampling.max_new_tokens)))
  if checkpoint_path and os.path.exists(checkpoint_path):
    os.remove(checkpoint_path)  # the batch is complete; a rerun starts afresh
  start = time.perf_counter()
  rewards = np.asarray(process_rows.finish_rows(envs, sandbox, mine), np.float32)
  mine.verify_seconds += time.perf_counter() - start
  rollout = process_data.fetch(rollout)
  turns = np.array([env.turns for env in envs], np.int32)
  for b in process_rows.owned(batch):
    mine.record_episode(int(calls[b]), int(turns[b]), float(rewards[b]),
                        int(rollout.response_lens_B[b]))
  metrics.merge(process_rows.across_processes(mine))
  return EpisodeResult(rollout, rewards, turns, calls, exhausted, metrics)
