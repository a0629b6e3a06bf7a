"""Curriculum: moves toward the band on synthetic pass rates; exact state round trip."""

import json

import numpy as np
import pytest

from mixture_fixtures import A, B
from rl_post.data.curriculum import Curriculum, CurriculumConfig
from rl_post.data.mixture import TaskConfig, TaskMixture

LEVELS = {A: (1, 2, 3, 4, 5), B: (1, 2, 3, 4, 5)}
# synthetic model: pass probability per level; only level 3 lies inside [0.3, 0.7]
PASS_PROB = {1: 0.97, 2: 0.9, 3: 0.5, 4: 0.1, 5: 0.02}


def _mixture(start=0, width=1, window=32, seed=0):
  curriculum = dict(enabled=True, low=0.3, high=0.7, window=window, width=width, start=start)
  return TaskMixture(TaskConfig(domains=(A, B), weights=(1, 1), heldout_size=0,
                                curriculum=curriculum), seed=seed)


def _run(mixture, steps, rng, batch=32):
  """Trains the synthetic model; returns each domain's active level per step."""
  trace = {A: [], B: []}
  for step in range(steps):
    tasks = mixture.sample(step, batch)
    passed = rng.random(len(tasks)) < np.array([PASS_PROB[t.difficulty] for t in tasks])
    mixture.update(tasks, passed)
    for d in trace:
      trace[d].append(mixture.curriculum.active_levels(d)[0])
  return trace


@pytest.mark.parametrize("start, direction", [(0, 1), (4, -1)])
def test_difficulty_moves_toward_band_and_stays(start, direction):
  mixture = _mixture(start=start)
  trace = _run(mixture, 120, np.random.default_rng(0))
  for d, levels in trace.items():
    steps = np.diff([start + 1] + levels)
    first = levels.index(3)  # reaches the level whose pass rate is in the band ...
    assert (steps[:first + 1] * direction >= 0).all(), levels  # ... moving one way only
    assert np.mean(np.array(levels[first:]) == 3) > 0.9, levels  # ... and stays there
  metrics = mixture.curriculum_metrics()
  assert metrics[f"curriculum/{A}/difficulty"] == pytest.approx(trace[A][-1])


def test_rules_band_window_width_and_ends():
  config = CurriculumConfig(enabled=True, low=0.25, high=0.75, window=8, width=2)
  c = Curriculum(config, {A: (1, 2, 3, 4)})
  assert c.active_levels(A) == (1, 2)
  assert c.update([A] * 7, [True] * 7) == []  # window not full yet
  assert c.update([A], [True]) == [A] and c.active_levels(A) == (2, 3)
  assert c.pass_rate(A) is None  # the record restarts after a move
  c.update([A] * 8, [True] * 8)
  assert c.active_levels(A) == (3, 4)
  assert c.update([A] * 8, [True] * 8) == []  # already at the hardest window
  c.update([A] * 8, [True, False] * 4)  # 0.5: inside the band
  assert c.active_levels(A) == (3, 4)
  c.update([A] * 8, [False] * 8)
  assert c.active_levels(A) == (2, 3) and c.moves[A] == 3
  disabled = Curriculum(CurriculumConfig(enabled=False), {A: (1, 2, 3, 4)})
  assert disabled.update([A] * 100, [True] * 100) == []
  assert disabled.active_levels(A) == (1, 2, 3, 4)
  with pytest.raises(ValueError, match="unknown domain"):
    c.update([B], [True])


def test_state_round_trip_continues_the_same_stream():
  rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
  straight = _mixture(window=16)
  trace_a = _run(straight, 30, rng_a)

  first = _mixture(window=16)
  trace_b = _run(first, 12, rng_b)
  state = json.loads(json.dumps(first.state_dict(), allow_nan=False))  # as in checkpoints
  resumed = _mixture(window=16)
  resumed.load_state_dict(state)
  assert resumed.state_dict() == first.state_dict()
  for step in range(12, 30):
    tasks = resumed.sample(step, 32)
    assert [t.task_id for t in tasks] == [t.task_id for t in first.sample(step, 32)]
    passed = rng_b.random(len(tasks)) < np.array([PASS_PROB[t.difficulty] for t in tasks])
    resumed.update(tasks, passed)
    first.update(tasks, passed)
    for d in trace_b:
      trace_b[d].append(resumed.curriculum.active_levels(d)[0])
  assert trace_b == trace_a
  assert resumed.state_dict() == straight.state_dict()
  assert any(m > 0 for m in straight.curriculum.moves.values())


@pytest.mark.parametrize("mutate, match", [
    (lambda s: s["curriculum"].update(version=0), "version"),
    (lambda s: s["curriculum"]["domains"].pop(B), "domains"),
    (lambda s: s["curriculum"]["domains"][A].update(index=9), "out of range"),
    (lambda s: s["curriculum"]["domains"][A].update(history=[2]), "history"),
])
def test_bad_state_is_rejected(mutate, match):
  mixture = _mixture()
  state = mixture.state_dict()
  mutate(state)
  with pytest.raises(ValueError, match=match):
    mixture.load_state_dict(state)
