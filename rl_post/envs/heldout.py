"""Held-out episode tasks, apart from training and from the cold start, and their episodes.

  tasks = heldout_tasks(section, seed)           # episodes.heldout_size tasks
  records = run_model(params, tasks, samples=1, ...)  # or run_policy(tasks, policy, ...)
  rl_post.eval.episodes.heldout_metrics(records, "eval")

Tasks: `heldout_size` tasks drawn from the held-out stream, a function of the
seed alone, taking the (domain, level) cells of `episodes.domains` x
`episodes.heldout_difficulties` in turn (so every cell gets its share), no
two with the same content (`task_key`). Training draws
(`trainer_rounds.draw_tasks`) and the cold start (`rl_post.sft.episodes`)
redraw any task whose key is held out, so no held-out problem is trained on
or imitated, whatever its random `task_id`. Levels in
`heldout_difficulties` but not in `difficulties` are levels training never
draws.

Records: one `EpisodeRecord` per episode, scored by the verifier alone (no
shaping; a verification run that failed in the sandbox scores 0 and is
marked), with the episode's calls, turns and tokens; samples of one task
share its index, for pass@k.
"""

import dataclasses
from typing import Callable, Optional, Sequence

import jax
import numpy as np

from rl_post.envs import driver
from rl_post.envs.domains.base import draw_distinct
from rl_post.envs.episodes import EpisodeConfig, run_episodes
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.errors import ConfigError

HELDOUT_STREAM = 0x4E1D  # the held-out set's own task stream
MAX_REDRAWS = 1000


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
  """One held-out episode.

  Attributes:
    task: index of its task in the held-out set (a task's samples share it).
    domain, difficulty: its task's.
    score: the verifier's score of the end state (0 when its run failed).
    verify_error: the verification run failed in the sandbox.
    tool_calls: calls besides the one that ended the episode (`Env.tool_calls`).
    call_successes: those whose tool ran (`Env.call_successes`).
    turns: model turns.
    tokens: response tokens, model turns plus tool responses (0 for a text policy).
    context_exhausted: ended because a tool response did not fit the budget.
  """
  task: int
  domain: str
  difficulty: int
  score: float
  verify_error: bool
  tool_calls: int
  call_successes: int
  turns: int
  tokens: int = 0
  context_exhausted: bool = False

  @property
  def solved(self) -> bool:
    return self.score == 1.0 and not self.verify_error


def heldout_tasks(config, seed: int, domains: Optional[dict] = None) -> list:
  """The held-out set of an `EpisodesConfig` (module docstring); [] when heldout_size is 0.

  domains: spec -> EnvDomain (`config.env_domains()`, loaded when None).

  Raises:
    ConfigError: on `episodes.heldout_difficulties`, a level a domain does not
      have; on `episodes.heldout_size`, a cell with too few distinct tasks.
  """
  if not config.heldout_size:
    return []
  domains = config.env_domains() if domains is None else domains
  levels = config.heldout_difficulties or config.difficulties
  cells = [(spec, level) for spec in config.domains for level in levels]
  rng = np.random.default_rng([seed, HELDOUT_STREAM])
  tasks, seen = [], set()
  for i in range(config.heldout_size):
    spec, level = cells[i % len(cells)]
    try:
      task = draw_distinct(domains[spec], rng, level, seen, MAX_REDRAWS)
    except ValueError as e:
      raise ConfigError("episodes.heldout_difficulties", levels,
                        f"domain {spec!r}: {e}") from None
    if task is None:
      raise ConfigError("episodes.heldout_size", config.heldout_size,
                        f"domain {spec!r} level {level} has no new task in {MAX_REDRAWS} "
                        "draws: lower it")
    tasks.append(task)
  return tasks


def _records(indices, tasks, envs, rewards, tokens_B=None, exhausted_B=None) -> list:
  return [EpisodeRecord(
      task=int(i), domain=task.domain, difficulty=int(task.difficulty), score=float(reward),
      verify_error=env.verify_error is not None, tool_calls=int(env.tool_calls),
      call_successes=int(env.call_successes), turns=int(env.turns),
      tokens=0 if tokens_B is None else int(tokens_B[b]),
      context_exhausted=False if exhausted_B is None else bool(exhausted_B[b]))
      for b, (i, task, env, reward) in enumerate(zip(indices, tasks, envs, rewards))]


def _rows(tasks: Sequence, samples: int):
  """(task index, task) of every episode: each task `samples` times, task after task."""
  if samples < 1:
    raise ValueError(f"samples must be >= 1, got {samples}")
  return [(i, t) for i, t in enumerate(tasks) for _ in range(samples)]


def run_model(params, tasks: Sequence, *, samples: int, make_envs: Callable, tokenizer,
              model_config, sampling, sandbox, rng, config: EpisodeConfig, batch_size: int,
              encoders: Optional[dict] = None,
              metrics: Optional[EpisodeMetrics] = None) -> list:
  """`samples` episodes of each task with the model, `batch_size` rows per
  `run_episodes` call (chunk j samples with `fold_in(rng, j)`); returns the records."""
  rows = _rows(tasks, samples)
  out = []
  for j, start in enumerate(range(0, len(rows), batch_size)):
    indices, chunk = zip(*rows[start:start + batch_size])
    envs = make_envs(chunk)
    result = run_episodes(params, envs, list(chunk), tokenizer=tokenizer,
                          model_config=model_config, sampling=sampling, sandbox=sandbox,
                          rng=jax.random.fold_in(rng, j), config=config, metrics=metrics,
                          **(encoders or {}))
    out += _records(indices, chunk, envs, result.rewards_B, result.rollout.response_lens_B,
                    result.context_exhausted_B)
  return out


def run_policy(tasks: Sequence, policy: Callable, sandbox, *, samples: int,
               make_envs: Callable, metrics: Optional[EpisodeMetrics] = None) -> list:
  """`samples` episodes of each task with a text policy (`driver.Policy`: the oracle, a
  random baseline); returns the records."""
  indices, chunk = zip(*_rows(tasks, samples))
  envs = make_envs(chunk)
  rewards = driver.run_text_episodes(envs, list(chunk), policy, sandbox, metrics)
  return _records(indices, chunk, envs, rewards)
