"""Episode rows split over processes: each host runs the tools and verification of its rows.

  outs = step_rows(envs, active, texts, sandbox, metrics)  # every active row's step
  rewards = finish_rows(envs, sandbox, metrics)            # every row's verifier score
  metrics = across_processes(metrics)                      # every process's rows, combined

In a multi-process run every process drives the whole batch of episodes
through the sampler: generation is one SPMD program over the global mesh,
so every process hands it the same host values (prompts, appended tool
responses, budgets). The host work of a row, its tool calls and its final
verification run, is done only by the process that owns the row: process p
of P owns rows `owned(n)` = `process_block(n, p, P)` (an even split in row
order, as the reward pool splits single-turn rows) and runs them on its own
sandbox.

After each turn the owners' step results are all-gathered (the pickled
(observation, done, info) of each stepped row: one small collective), so
every process appends the same tool responses and decodes in lockstep. At
the end the owners' scores and counts (turns, calls, successful calls,
verification error) are gathered and copied onto every process's envs, so a
caller reads every row's counts from its envs on every process, and the
processes' `EpisodeMetrics` of their own rows are combined
(`EpisodeMetrics.concurrent`: counts add up, seconds are the longest
process's). With one process nothing is gathered: the calls are
`driver.step_many` and `driver.final_rewards`.

What P processes compute: with the same params, key and tool outputs, the
one-process batch, token for token, and the same metrics apart from
seconds. Tool outputs are the same for the same calls except what depends
on time: a call that runs into its time limit, or an episode whose tool
budget (charged in measured wall time) runs out near a call.
"""

import time
from typing import Sequence

import jax

from rl_post.envs import driver
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.rewards.process_split import allgather_objects, process_block


def owned(n: int) -> range:
  """The rows of an n-row episode batch whose tools this process runs."""
  block = process_block(n, jax.process_index(), jax.process_count())
  return range(block.start, block.stop)


def step_rows(envs: Sequence, active: Sequence[int], texts: Sequence[str], sandbox,
              metrics: EpisodeMetrics) -> list:
  """(observation, done, info) of every active row, each row stepped by its owner.

  Args:
    envs: every row's env (the same rows on every process).
    active: the rows that took a turn; texts: their turns, in that order.
  Every process must call it with the same rows and texts (a collective).
  """
  if len(active) != len(texts):
    raise ValueError(f"{len(active)} active rows but {len(texts)} turns")
  if jax.process_count() == 1:
    return driver.step_many([envs[b] for b in active], texts, sandbox, metrics)
  mine = owned(len(envs))
  rows = [(b, text) for b, text in zip(active, texts) if b in mine]
  outs = driver.step_many([envs[b] for b, _ in rows], [text for _, text in rows], sandbox,
                          metrics)
  start = time.perf_counter()  # waiting for the other hosts' tools is tool time here
  by_row = {}
  for block in allgather_objects([(b, out) for (b, _), out in zip(rows, outs)]):
    by_row.update(block)
  metrics.tool_seconds += time.perf_counter() - start
  return [by_row[b] for b in active]


def finish_rows(envs: Sequence, sandbox, metrics: EpisodeMetrics) -> list:
  """Every row's verifier score, each verified by its owner; the owners' counts
  (`turns`, `tool_calls`, `call_successes`, `verify_error`) are copied onto the
  other processes' envs. A collective, like `step_rows`."""
  if jax.process_count() == 1:
    return driver.final_rewards(envs, sandbox, metrics)
  mine = owned(len(envs))
  rewards = driver.final_rewards([envs[b] for b in mine], sandbox, metrics)
  tallies = {}
  for block in allgather_objects({b: (reward, envs[b].turns, envs[b].tool_calls,
                                      envs[b].call_successes, envs[b].verify_error)
                                  for b, reward in zip(mine, rewards)}):
    tallies.update(block)
  for b, env in enumerate(envs):
    if b not in mine:
      _, env.turns, env.tool_calls, env.call_successes, env.verify_error = tallies[b]
      env.done = True
  return [tallies[b][0] for b in range(len(envs))]


def across_processes(metrics: EpisodeMetrics) -> EpisodeMetrics:
  """Every process's metrics of its own rows as one, the same on every process (a
  collective); per-episode lists in process order, which is row order."""
  if jax.process_count() == 1:
    return metrics
  return EpisodeMetrics.concurrent(allgather_objects(metrics))
