"""Multi-domain task sampling, deterministic in (seed, stream, step, round).

A batch is a pure function of the seed, the step (and the refill round of
dynamic filtering) and the curriculum state; the curriculum state is saved
in checkpoints, so a resumed run sees exactly the tasks it would have seen.

Domain shares come from the configured weights, raised to a floor share so
long-tail domains keep appearing. Within a domain, the active difficulty
levels (all of them, or the curriculum's window) are split into bins whose
target ratios come from the config. A held-out evaluation set is drawn from
its own stream over all levels and excluded from training batches.
"""

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from rl_post.config_sections import check, from_section
from rl_post.data.curriculum import Curriculum, CurriculumConfig
from rl_post.errors import ConfigError, UserError
from rl_post.tasks import registry
from rl_post.tasks.base import Domain, Task

_STREAMS = {"train": 0, "heldout": 1, "sft": 2}
_MAX_REDRAWS = 1000


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Which domains, with what weights and difficulty levels.

  Attributes:
    domains: domain names (see `rl_post.tasks.registry`).
    weights: sampling weight per domain (normalised); () = equal weights.
    floors: minimum share of the batch per domain: () none, one value for
      every domain, or one per domain; their sum must be <= 1.
    difficulties: difficulty levels to use, each a level of every domain;
      () = each domain's own `difficulty_levels`.
    domain_difficulties: {domain: levels} overriding `difficulties` for
      that domain (training and held-out draws).
    demo_difficulties: {domain: levels} with demonstrations: the "sft"
      stream draws only these levels of that domain (a subset of its
      levels); the others are left to RL, which learns them from the
      verifier alone. Domains not listed have demonstrations at every level.
    difficulty_ratios: target ratios of difficulty bins, easiest first; the
      active levels are split evenly into len(ratios) bins. () = uniform.
    curriculum: the `CurriculumConfig` fields (a dict in the config).
    domain_options: per-domain constructor options.
    heldout_size: number of held-out evaluation tasks (per eval set when
      `eval_sets` is set).
    eval_sets: domains whose held-out tasks are read from fixed tfds eval
      sets in `eval_data_dir` (see `rl_post.data.eval_sets`); () = drawn
      in memory.
    eval_data_dir: directory of the built eval sets.
  """
  domains: tuple[str, ...] = ("arithmetic",)
  weights: tuple[float, ...] = ()
  floors: tuple[float, ...] = ()
  difficulties: tuple[int, ...] = ()
  difficulty_ratios: tuple[float, ...] = ()
  domain_difficulties: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
  demo_difficulties: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
  curriculum: Mapping | CurriculumConfig = dataclasses.field(default_factory=dict)
  domain_options: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
  heldout_size: int = 256
  eval_sets: tuple[str, ...] = ()
  eval_data_dir: str = ""

  def __post_init__(self):
    check(len(self.domains) > 0, "domains", "must not be empty", self.domains)
    check(len(set(self.domains)) == len(self.domains), "domains", "must not repeat a domain",
          self.domains)
    check(len(self.weights) in (0, len(self.domains)), "weights",
          f"must have one entry per domain ({len(self.domains)}) or be empty (equal)",
          self.weights)
    check(not self.weights or all(w >= 0 for w in self.weights) and sum(self.weights) > 0,
          "weights", "must be >= 0 with a positive sum", self.weights)
    check(len(self.floors) in (0, 1, len(self.domains)), "floors",
          f"must be empty, one value or one per domain ({len(self.domains)})", self.floors)
    floors = self.floor_shares()
    check(all(f >= 0 for f in floors) and sum(floors) <= 1 + 1e-9, "floors",
          "must be >= 0 and sum (over domains) to <= 1", self.floors)
    check(all(r >= 0 for r in self.difficulty_ratios)
          and (not self.difficulty_ratios or sum(self.difficulty_ratios) > 0),
          "difficulty_ratios", "must be >= 0 with a positive sum", self.difficulty_ratios)
    check(self.heldout_size >= 0, "heldout_size", "must be >= 0", self.heldout_size)
    bad_sets = [d for d in self.eval_sets if d not in self.domains]
    check(not bad_sets, "eval_sets", f"must name configured domains; not configured: {bad_sets}",
          self.eval_sets)
    check(not self.eval_sets or bool(self.eval_data_dir), "eval_data_dir",
          "must be set when eval_sets is not empty", self.eval_data_dir)
    for field in ("domain_difficulties", "demo_difficulties"):
      levels = getattr(self, field)
      unknown = [d for d in levels if d not in self.domains]
      check(not unknown, field, f"must name configured domains; not configured: {unknown}",
            dict(levels))
      check(all(len(v) > 0 for v in levels.values()), field,
            "must give each listed domain at least one level", dict(levels))
      object.__setattr__(self, field, {d: tuple(int(x) for x in v) for d, v in levels.items()})
    object.__setattr__(self, "curriculum", from_section(
        CurriculumConfig, self.curriculum if isinstance(self.curriculum, Mapping)
        else dataclasses.asdict(self.curriculum), "curriculum"))
    for name in self.domains:
      if not registry.is_known(name):
        raise ValueError(f"domains has unknown domain {name!r}; "
                         f"registered: {registry.available()}")

  def floor_shares(self) -> tuple[float, ...]:
    """The floor of every domain (broadcasting a single value)."""
    if len(self.floors) == 1:
      return tuple(self.floors) * len(self.domains)
    return tuple(self.floors) or (0.0,) * len(self.domains)


def domain_shares(weights: Sequence[float], floors: Sequence[float]) -> np.ndarray:
  """Sampling probability per domain: weight shares, raised to the floors.

  Domains whose weight share is below their floor get exactly the floor; the
  others split the remaining mass in proportion to their weights (repeated
  until no share is below its floor).
  """
  w, f = np.asarray(weights, np.float64), np.asarray(floors, np.float64)
  fixed = np.zeros(len(w), bool)
  p = w / w.sum()
  while True:
    free = ~fixed
    mass = 1.0 - f[fixed].sum()
    if w[free].sum() <= 0:
      break
    p = np.where(fixed, f, mass * w / w[free].sum())
    low = free & (p < f)
    if not low.any():
      break
    fixed |= low
  return np.where(fixed, f, p)


def level_probs(num_levels: int, ratios: Sequence[float]) -> np.ndarray:
  """Probability of each of `num_levels` levels under bin ratios.

  The unit interval is cut into len(ratios) equal bins carrying the ratios
  and into num_levels equal level cells; a level gets the ratio mass that
  overlaps its cell, so any number of bins maps onto any number of levels
  (bins == levels: exactly the ratios; () : uniform).
  """
  if not len(ratios):
    return np.full(num_levels, 1.0 / num_levels)
  r = np.asarray(ratios, np.float64) / np.sum(ratios)
  k = len(r)
  edges_l, edges_b = np.linspace(0, 1, num_levels + 1), np.linspace(0, 1, k + 1)
  overlap = np.clip(np.minimum(edges_l[1:, None], edges_b[None, 1:])
                    - np.maximum(edges_l[:-1, None], edges_b[None, :-1]), 0, None)
  p = overlap @ (r * k)
  return p / p.sum()


def _pick(rng: np.random.Generator, cdf: np.ndarray) -> int:
  """An index drawn with probabilities whose cumulative sums are `cdf`.

  One uniform and a binary search: cheaper than `rng.choice(p=...)`, which
  revalidates p on every call.
  """
  return min(int(np.searchsorted(cdf, rng.random(), side="right")), len(cdf) - 1)


def _make_domain(name: str, options) -> Domain:
  """The registered domain `name` built with `tasks.domain_options[name]`; a constructor's
  complaint about an option is a config error on that section."""
  try:
    return registry.make_domain(name, options)
  except UserError:
    raise
  except (ValueError, TypeError) as e:
    plain = options.to_dict() if hasattr(options, "to_dict") else dict(options or {})
    raise ConfigError(f"tasks.domain_options.{name}", plain, str(e)) from None


class TaskMixture:
  """Samples tasks across domains and difficulties; owns the curriculum."""

  def __init__(self, config: TaskConfig, seed: int, heldout: Sequence[Task] | None = None):
    """Args:
      config: the tasks section.
      seed: the run seed.
      heldout: fixed held-out tasks (e.g. read from eval sets); None draws
        `heldout_size` tasks from the held-out stream.
    """
    self.config, self.seed = config, seed
    self.domains: dict[str, Domain] = {
        name: _make_domain(name, config.domain_options.get(name)) for name in config.domains}
    for name, domain in self.domains.items():
      if domain.name != name:
        raise ValueError(f"domain {name!r} must set name = {name!r} (got {domain.name!r}): "
                         "tasks are routed to verifiers by this name")
    self.levels = {name: self._levels_of(name, domain) for name, domain in self.domains.items()}
    self._shares = domain_shares(config.weights or (1.0,) * len(config.domains),
                                 config.floor_shares())
    self.curriculum = Curriculum(config.curriculum, self.levels)
    self._domain_cdf = np.cumsum(self._shares)
    self._static = {d: (lv, np.cumsum(level_probs(len(lv), config.difficulty_ratios)))
                    for d, lv in self.levels.items()}
    self.demo_levels = self._demo_levels()
    self._demo = {d: (lv, np.cumsum(level_probs(len(lv), config.difficulty_ratios)))
                  for d, lv in self.demo_levels.items()}
    self._active = {}
    self._refresh()
    if heldout is None:
      heldout = self._draw(_STREAMS["heldout"], (0,), config.heldout_size, exclude=frozenset(),
                           unique=True, dists=self._static)
    self.heldout = list(heldout)
    self._heldout_ids = frozenset(t.task_id for t in self.heldout)

  def _levels_of(self, name: str, domain: Domain) -> tuple[int, ...]:
    levels = (self.config.domain_difficulties.get(name) or tuple(self.config.difficulties)
              or tuple(domain.difficulty_levels))
    bad = [d for d in levels if d not in domain.difficulty_levels]
    if bad:
      field = ("tasks.domain_difficulties" if self.config.domain_difficulties.get(name)
               else "tasks.difficulties")
      raise ConfigError(field, levels, f"has levels {bad} that domain {name!r} does not have "
                        f"(its levels: {tuple(domain.difficulty_levels)}); use () for each "
                        "domain's own")
    if not levels:
      raise ValueError(f"domain {name!r} has no difficulty levels")
    return levels

  def _demo_levels(self) -> dict[str, tuple[int, ...]]:
    """{domain: levels the "sft" stream draws}: demo_difficulties or all levels."""
    out = {}
    for name, levels in self.levels.items():
      demo = self.config.demo_difficulties.get(name, levels)
      bad = [d for d in demo if d not in levels]
      if bad:
        raise ValueError(f"demo_difficulties[{name!r}] has {bad}, which are not among the "
                         f"domain's configured levels {levels}")
      out[name] = tuple(demo)
    return out

  def _refresh(self, names=None):
    """Recomputes the level distribution of (moved) domains."""
    for d in names or self.levels:
      active = self.curriculum.active_levels(d)
      self._active[d] = (active,
                         np.cumsum(level_probs(len(active), self.config.difficulty_ratios)))

  @property
  def shares(self) -> dict[str, float]:
    return dict(zip(self.config.domains, self._shares.tolist()))

  def level_distribution(self, domain: str) -> dict[int, float]:
    """{level: probability} of training draws of `domain` right now."""
    levels, cdf = self._active[domain]
    return dict(zip(levels, np.diff(cdf, prepend=0.0).tolist()))

  def _draw(self, stream: int, key: tuple, n: int, exclude: frozenset, unique: bool = False,
            dists=None) -> list[Task]:
    """n tasks not in `exclude` (and, with `unique`, no task twice)."""
    dists = dists or self._active
    rng = np.random.default_rng([self.seed, stream, *key])
    tasks, seen = [], set(exclude)
    for _ in range(n):
      name = self.config.domains[_pick(rng, self._domain_cdf)]
      levels, cdf = dists[name]
      difficulty = levels[_pick(rng, cdf)]
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

  def sample(self, step: int, n: int, stream: str = "train", round: int = 0) -> list[Task]:
    """The n tasks of batch `step` (refill `round` of dynamic filtering).

    Never contains a held-out task. Depends on (seed, stream, step, round)
    and, for the train stream, on the curriculum state.
    """
    if stream not in _STREAMS or stream == "heldout":
      raise ValueError(f"stream must be 'train' or 'sft', got {stream!r}")
    key = (step,) if round == 0 else (step, round)
    dists = self._active if stream == "train" else self._demo
    return self._draw(_STREAMS[stream], key, n, exclude=self._heldout_ids, dists=dists)

  def update(self, tasks: Sequence[Task], passed: Sequence[bool]) -> list[str]:
    """Feeds outcomes (one per task) to the curriculum; returns moved domains."""
    moved = self.curriculum.update([t.domain for t in tasks], passed)
    self._refresh(moved)
    return moved

  def curriculum_metrics(self) -> dict[str, float]:
    """`curriculum/<d>/difficulty` (expected level of training draws) and moves."""
    out = {}
    for d in self._active:
      dist = self.level_distribution(d)
      out[f"curriculum/{d}/difficulty"] = float(sum(k * p for k, p in dist.items()))
      if self.config.curriculum.enabled:
        out[f"curriculum/{d}/moves"] = float(self.curriculum.moves[d])
    return out

  def state_dict(self) -> dict:
    return {"curriculum": self.curriculum.state_dict()}

  def load_state_dict(self, state: Mapping) -> None:
    if "curriculum" not in state:
      raise ValueError(f"mixture state needs a 'curriculum' entry, got keys {sorted(state)}")
    self.curriculum.load_state_dict(state["curriculum"])
    self._refresh()

  def domain_of(self, task: Task) -> Domain:
    return self.domains[task.domain]


def stratified_counts(tasks: Sequence[Task]) -> dict[tuple[str, int], int]:
  counts: dict[tuple[str, int], int] = {}
  for t in tasks:
    counts[(t.domain, t.difficulty)] = counts.get((t.domain, t.difficulty), 0) + 1
  return counts
