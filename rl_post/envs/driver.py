"""Batched episodes: the tool calls of all episodes that made one go through one run_many.

`run_text_episodes` drives envs with a text policy (scripted oracle,
random baseline, or any callable); `rl_post.envs.episodes` drives them with
the model through the rollout engine. Both use `step_many` and
`final_rewards`.
"""

import time
from typing import Callable, Optional, Sequence

from rl_post.envs import tools
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.sandbox import result as result_lib


def step_many(envs: Sequence, turn_texts: Sequence[str], sandbox,
              metrics: Optional[EpisodeMetrics] = None):
  """Steps each env with its turn; returns [(observation, done, info)]."""
  if len(envs) != len(turn_texts):
    raise ValueError(f"{len(envs)} envs but {len(turn_texts)} turns")
  planned = [env.plan(text) for env, text in zip(envs, turn_texts)]
  start = time.perf_counter()
  results = tools.run_planned(sandbox, planned)
  if metrics is not None:
    metrics.tool_seconds += time.perf_counter() - start
  outs = [env.complete(p, r) for env, p, r in zip(envs, planned, results)]
  if metrics is not None:
    for _, _, info in outs:
      metrics.record_step(info)
  return outs


def final_rewards(envs: Sequence, sandbox, metrics: Optional[EpisodeMetrics] = None) -> list:
  """Each finished env's verifier on its end state; runs batched in fresh sandbox runs.

  A verification run the sandbox rejects or fails scores 0 (`Env.reward_from`)
  and is counted in `metrics.verify_errors`.
  """
  requests = [env.verification_request() for env in envs]
  planned = [tools.PlannedCall("verify", request=r) for r in requests]
  results = tools.run_planned(sandbox, planned)
  rewards = [env.reward_from(r, sandbox) for env, r in zip(envs, results)]
  if metrics is not None:
    metrics.verify_errors.update(env.verify_error for env in envs if env.verify_error)
  return rewards


Policy = Callable[[object, list], str]  # (task, observations so far) -> next turn text


def run_text_episodes(envs: Sequence, tasks: Sequence, policy: Policy, sandbox,
                      metrics: Optional[EpisodeMetrics] = None) -> list:
  """Runs one episode per (env, task) with `policy`; returns the final rewards."""
  metrics = metrics if metrics is not None else EpisodeMetrics()
  observations = [[env.reset(task)] for env, task in zip(envs, tasks)]
  calls = [0] * len(envs)
  active = list(range(len(envs)))
  while active:
    start = time.perf_counter()
    turns = [policy(tasks[i], observations[i]) for i in active]
    metrics.generation_seconds += time.perf_counter() - start
    outs = step_many([envs[i] for i in active], turns, sandbox, metrics)
    for i, (observation, done, info) in zip(active, outs):
      observations[i].append(observation)
      calls[i] += int(info.called)
    active = [i for i, (_, done, _) in zip(active, outs) if not done]
  start = time.perf_counter()
  rewards = final_rewards(envs, sandbox, metrics)
  metrics.verify_seconds += time.perf_counter() - start
  for env, n, reward in zip(envs, calls, rewards):
    metrics.record_episode(n, env.turns, reward)
  return rewards
