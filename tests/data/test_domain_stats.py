"""Per-domain and per-difficulty statistics against hand-computed values."""

import numpy as np
import pytest

from rl_post.data.domain_stats import domain_metrics
from rl_post.tasks.base import Task, Verdict


def _task(domain, level):
  return Task(f"{domain}/{level}", domain, "p", level, None)


def test_hand_computed_statistics():
  tasks = [_task("a", 1), _task("a", 1), _task("a", 2), _task("b", 3)]
  # the third timed out; the fourth's answer could not be parsed: wrong, not an error
  verdicts = [Verdict(1.0, True), Verdict(0.5, True), Verdict(0.0, False, error="timeout: 2 s"),
              Verdict(0.0, False, error="no <answer> tag")]
  error_kinds = [None, None, "timeout", None]
  rewards = np.array([1.1, 0.6, 0.0, 0.0])
  components = {"outcome": np.array([1.0, 0.5, 0.0, 0.0]), "format": np.array([1., 1., 0., 0.])}
  m = domain_metrics(tasks, verdicts, rewards, components, error_kinds)
  assert m == pytest.approx({
      "domain/a/count": 3, "domain/a/pass_rate": 1 / 3, "domain/a/reward": 1.7 / 3,
      "domain/a/errors": 1, "domain/a/outcome": 0.5, "domain/a/format": 2 / 3,
      "domain/a/difficulty/1/count": 2, "domain/a/difficulty/1/pass_rate": 0.5,
      "domain/a/difficulty/2/count": 1, "domain/a/difficulty/2/pass_rate": 0.0,
      "domain/b/count": 1, "domain/b/pass_rate": 0.0, "domain/b/reward": 0.0,
      "domain/b/errors": 0, "domain/b/outcome": 0.0, "domain/b/format": 0.0,
      "domain/b/difficulty/3/count": 1, "domain/b/difficulty/3/pass_rate": 0.0})


def test_mismatched_lengths_are_an_error():
  with pytest.raises(ValueError, match="needs N=1"):
    domain_metrics([_task("a", 1)], [], np.zeros(1), {}, [None])
  with pytest.raises(ValueError, match="needs N=1"):
    domain_metrics([_task("a", 1)], [Verdict(1.0, True)], np.zeros(1), {"x": np.zeros(2)},
                   [None])
  with pytest.raises(ValueError, match="needs N=1"):
    domain_metrics([_task("a", 1)], [Verdict(1.0, True)], np.zeros(1), {}, [])
