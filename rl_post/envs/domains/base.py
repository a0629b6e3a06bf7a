"""The `EnvDomain` interface: a multi-step domain's tasks, oracle and environment.

  class WordHunt(EnvDomain):
    name = "word_hunt"
    env_class = WordHuntEnv                # an `rl_post.envs.base.Env` subclass

    def generate(self, rng, difficulty):   # -> Task, with task.domain == self.name
      ...

    def oracle_turn(self, task, observations):
      ...                                  # the next turn of a scripted solver

Domains load by registered name or "module:Class"
(`rl_post.envs.domains.registry`), so a domain defined outside the package
is one module plus one config line (`episodes.domains`).
"""

import abc
import hashlib
import json
from typing import Optional

import numpy as np

from rl_post.envs.base import Env
from rl_post.tasks.base import Task


class EnvDomain(abc.ABC):
  """A multi-step domain; stateless, so one instance serves every episode.

  Attributes:
    name: the domain's name; its tasks carry it as `task.domain` (episodes
      are routed to environments and metrics by it).
    env_class: the `Env` subclass an episode of this domain runs in.
  """
  name: str = ""
  env_class: Optional[type] = None

  @abc.abstractmethod
  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    """A task at `difficulty`, a function of `rng` alone."""

  @abc.abstractmethod
  def oracle_turn(self, task: Task, observations: list) -> str:
    """The scripted solver's next turn (observations[0] is the prompt, observations[i]
    the tool response after turn i); its episodes score 1."""

  def make_env(self, **kwargs) -> Env:
    """A fresh environment (`Env` keyword arguments: limits, max_turns, extra_tools)."""
    return self.env_class(**kwargs)


def task_key(task: Task) -> str:
  """A fingerprint of what an episode of `task` shows and is graded on: its domain,
  level, prompt, target and metadata (the work dir, database, ...), never its id.

  Env domains draw a random number into `task_id`, so two draws of the same
  problem have different ids; sets that must not share a problem (held-out
  evaluation, cold-start demonstrations, training draws) compare these keys.
  """
  content = json.dumps([task.domain, task.difficulty, task.prompt, task.target,
                        task.metadata], sort_keys=True, default=repr)
  return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def draw_distinct(domain, rng, level: int, seen: set, max_draws: int):
  """A task of `level` whose `task_key` is not in `seen` (then added to it), or None
  when `max_draws` draws found none. A domain's ValueError passes through."""
  for _ in range(max_draws):
    task = domain.generate(rng, level)
    if task_key(task) not in seen:
      seen.add(task_key(task))
      return task
  return None
