"""Multi-domain task sampling, deterministic in (seed, stream, step).

Every batch is a pure function of the seed and the step, so a resumed run
sees exactly the tasks it would have seen, with no sampler state to save.
A held-out evaluation set is drawn from its own stream and excluded from
training batches.
"""

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from rl_post.config_sections import check
from rl_post.tasks import registry
from rl_post.tasks.base import Domain, Task

_STREAMS = {"train": 0, "heldout": 1, "sft": 2}
_MAX_REDRAWS = 1000


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Which domains, with what weights and difficulty levels.

  Attributes:
    domains: domain names (see `rl_post.tasks.registry`).
    weights: sampling weight per domain (normalised).
    difficulties: difficulty levels to draw uniformly from.
    domain_options: per-domain constructor options.
    heldout_size: number of held-out evaluation tasks.
  """
  domains: tuple[str, ...] = ("arithmetic",)
  weights: tuple[float, ...] = (1.0,)
  difficulties: tuple[int, ...] = (1, 2, 3)
  domain_options: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
  heldout_size: int = 256

  def __post_init__(self):
    check(len(self.domains) > 0, "domains", "must not be empty", self.domains)
    check(len(self.weights) == len(self.domains), "weights",
          f"must have one entry per domain ({len(self.domains)})", self.weights)
    check(all(w >= 0 for w in self.weights) and sum(self.weights) > 0, "weights",
          "must be >= 0 with a positive sum", self.weights)
    check(len(self.difficulties) > 0, "difficulties", "must not be empty", self.difficulties)
    check(self.heldout_size >= 0, "heldout_size", "must be >= 0", self.heldout_size)
    for name in self.domains:
      if not registry.is_known(name):
        raise ValueError(f"domains has unknown domain {name!r}; "
                         f"registered: {registry.available()}")


class TaskMixture:
  """Samples tasks across domains and difficulties."""

  def __init__(self, config: TaskConfig, seed: int):
    self.config, self.seed = config, seed
    self.domains: dict[str, Domain] = {
        name: registry.make_domain(name, config.domain_options.get(name))
        for name in config.domains}
    for name, domain in self.domains.items():
      if domain.name != name:
        raise ValueError(f"domain {name!r} must set name = {name!r} (got {domain.name!r}): "
                         "tasks are routed to verifiers by this name")
    for name, domain in self.domains.items():
      bad = [d for d in config.difficulties if d not in domain.difficulty_levels]
      if bad:
        raise ValueError(f"difficulties {bad} are not levels of domain {name!r} "
                         f"{domain.difficulty_levels}")
    self._probs = np.asarray(config.weights, np.float64) / sum(config.weights)
    self.heldout = self._draw(_STREAMS["heldout"], 0, config.heldout_size, exclude=frozenset(),
                              unique=True)
    self._heldout_ids = frozenset(t.task_id for t in self.heldout)

  def _draw(self, stream: int, step: int, n: int, exclude: frozenset,
            unique: bool = False) -> list[Task]:
    """n tasks not in `exclude` (and, with `unique`, no task twice)."""
    rng = np.random.default_rng([self.seed, stream, step])
    tasks, seen = [], set(exclude)
    for _ in range(n):
      name = self.config.domains[int(rng.choice(len(self._probs), p=self._probs))]
      difficulty = self.config.difficulties[int(rng.integers(len(self.config.difficulties)))]
      task = self._fresh_task(rng, name, difficulty, seen if unique else exclude)
      if unique:
        seen.add(task.task_id)
      tasks.append(task)
    return tasks

  def _fresh_task(self, rng, name: str, difficulty: int, exclude) -> Task:
    """A task of this domain and difficulty that is not excluded.

    Redrawing at the same level keeps the difficulty mix of training batches
    equal to the configured one even when a small level (1-digit sums) is
    largely taken by the held-out set.
    """
    for _ in range(_MAX_REDRAWS):
      task = self.domains[name].generate(rng, difficulty)
      if task.task_id not in exclude:
        return task
    raise ValueError(f"domain {name!r} difficulty {difficulty}: no new task outside the "
                     f"held-out set in {_MAX_REDRAWS} draws (the level has too few distinct "
                     "tasks); lower tasks.heldout_size or drop the level")

  def sample(self, step: int, n: int, stream: str = "train") -> list[Task]:
    """The n tasks of batch `step`; never contains a held-out task."""
    return self._draw(_STREAMS[stream], step, n, exclude=self._heldout_ids)

  def domain_of(self, task: Task) -> Domain:
    return self.domains[task.domain]


def stratified_counts(tasks: Sequence[Task]) -> dict[tuple[str, int], int]:
  counts: dict[tuple[str, int], int] = {}
  for t in tasks:
    counts[(t.domain, t.difficulty)] = counts.get((t.domain, t.difficulty), 0) + 1
  return counts
