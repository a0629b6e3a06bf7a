"""TaskMixture: domain shares with floors, difficulty ratios, determinism, bad configs."""

import collections

import numpy as np
import pytest

from mixture_fixtures import A, B, C, D
from rl_post.config_sections import from_section
from rl_post.data.mixture import TaskConfig, TaskMixture, domain_shares, level_probs


def _mixture(seed=0, **kw):
  kw.setdefault("heldout_size", 16)
  return TaskMixture(TaskConfig(**kw), seed=seed)


def _within_binomial(counts: dict, probs: dict, n: int, sigmas: float = 4.5):
  for key, p in probs.items():
    tol = sigmas * np.sqrt(p * (1 - p) / n) + 1e-12
    assert abs(counts.get(key, 0) / n - p) <= tol, (key, counts.get(key, 0) / n, p, tol)


def test_domain_shares_hand_computed():
  np.testing.assert_allclose(domain_shares([8, 1, 1], [0.2] * 3), [0.6, 0.2, 0.2])
  np.testing.assert_allclose(domain_shares([8, 1, 1], [0, 0, 0]), [0.8, 0.1, 0.1])
  # iterated: after 0.01->0.05 and 0.04->0.05, the rest re-split 0.9 as 85:10
  np.testing.assert_allclose(domain_shares([85, 10, 4, 1], [0.05] * 4),
                             [0.9 * 85 / 95, 0.9 * 10 / 95, 0.05, 0.05])
  # a zero-weight domain still appears at its floor
  np.testing.assert_allclose(domain_shares([1, 0], [0.0, 0.25]), [0.75, 0.25])
  rng = np.random.default_rng(0)
  for _ in range(200):
    n = int(rng.integers(2, 30))
    w = rng.exponential(size=n) ** 3
    f = rng.uniform(0, 1.0 / n, size=n)
    p = domain_shares(w, f)
    assert p.sum() == pytest.approx(1.0)
    assert (p >= f - 1e-12).all()
    free = p > f + 1e-12  # domains above their floor keep the ratio of their weights
    if free.sum() > 1:
      np.testing.assert_allclose(p[free] / p[free].sum(), w[free] / w[free].sum(), rtol=1e-9)


def test_draws_match_weights_and_floors():
  mixture = _mixture(domains=(A, B, C, D), weights=(85, 10, 4, 1), floors=(0.05,))
  expected = dict(zip((A, B, C, D), domain_shares([85, 10, 4, 1], [0.05] * 4)))
  assert mixture.shares == pytest.approx(expected)
  tasks = [t for step in range(40) for t in mixture.sample(step, 500)]
  _within_binomial(collections.Counter(t.domain for t in tasks), expected, len(tasks))
  assert min(collections.Counter(t.domain for t in tasks).values()) > 0.04 * len(tasks)


def test_empty_weights_are_equal_and_floors_broadcast():
  mixture = _mixture(domains=(A, B, C), weights=())
  assert mixture.shares == pytest.approx({A: 1 / 3, B: 1 / 3, C: 1 / 3})
  config = TaskConfig(domains=(A, B, C), weights=(1, 1, 1), floors=(0.1,))
  assert config.floor_shares() == (0.1, 0.1, 0.1)


def test_level_probs_maps_bins_onto_levels():
  np.testing.assert_allclose(level_probs(3, (0.2, 0.3, 0.5)), [0.2, 0.3, 0.5])
  np.testing.assert_allclose(level_probs(4, ()), [0.25] * 4)
  np.testing.assert_allclose(level_probs(4, (1, 3)), [0.125, 0.125, 0.375, 0.375])
  a, b, c = 0.2, 0.3, 0.5  # 3 bins onto 2 levels: level 0 holds bin 0 and half of bin 1
  np.testing.assert_allclose(level_probs(2, (a, b, c)), [a + b / 2, c + b / 2])
  np.testing.assert_allclose(level_probs(1, (a, b, c)), [1.0])


def test_draws_match_difficulty_ratios_per_domain():
  ratios = (0.1, 0.2, 0.3, 0.4)
  mixture = _mixture(domains=(A, "arithmetic"), weights=(1, 1), difficulty_ratios=ratios,
                     domain_options={"arithmetic": {"max_difficulty": 4}}, heldout_size=0)
  tasks = [t for step in range(20) for t in mixture.sample(step, 500)]
  for domain, levels in ((A, (1, 2, 3, 4, 5)), ("arithmetic", (1, 2, 3, 4))):
    assert mixture.levels[domain] == levels  # difficulties=(): each domain's own levels
    mine = [t.difficulty for t in tasks if t.domain == domain]
    expected = dict(zip(levels, level_probs(len(levels), ratios)))
    assert mixture.level_distribution(domain) == pytest.approx(expected)
    _within_binomial(collections.Counter(mine), expected, len(mine))


def test_stream_is_a_function_of_seed_step_round_and_excludes_heldout():
  mixture = _mixture(domains=(A, B), weights=(1, 1), heldout_size=50)
  ids = lambda tasks: [t.task_id for t in tasks]
  assert ids(mixture.sample(3, 16)) == ids(_mixture(domains=(A, B), weights=(1, 1),
                                                    heldout_size=50).sample(3, 16))
  assert ids(mixture.sample(3, 16)) != ids(mixture.sample(4, 16))
  assert ids(mixture.sample(3, 16, round=1)) != ids(mixture.sample(3, 16))
  assert ids(mixture.sample(3, 16, round=1)) == ids(mixture.sample(3, 16, round=1))
  assert ids(_mixture(seed=1, domains=(A, B), weights=(1, 1)).sample(3, 16)) != ids(
      mixture.sample(3, 16))
  heldout = set(ids(mixture.heldout))
  assert len(heldout) == 50 and not heldout & set(ids(mixture.sample(0, 64)))


@pytest.mark.parametrize("fields, match", [
    (dict(domains=(A, B), weights=(1, 1), floors=(0.6,)), "tasks.floors"),
    (dict(domains=(A, B), weights=(1, 1), floors=(0.1, 0.1, 0.1)), "tasks.floors"),
    (dict(domains=(A, B), weights=(1, 1), floors=(-0.1,)), "tasks.floors"),
    (dict(domains=(A, A), weights=(1, 1)), "tasks.domains"),
    (dict(domains=(A, B), weights=(1,)), "tasks.weights"),
    (dict(domains=(A, B), weights=(0, 0)), "tasks.weights"),
    (dict(domains=(A,), weights=(1,), difficulty_ratios=(0, 0)), "tasks.difficulty_ratios"),
    (dict(domains=(A,), weights=(1,), eval_sets=(B,), eval_data_dir="/x"), "tasks.eval_sets"),
    (dict(domains=(A,), weights=(1,), eval_sets=(A,)), "tasks.eval_data_dir"),
    (dict(domains=(A,), weights=(1,), curriculum={"low": 0.9, "high": 0.5}),
     r"tasks.curriculum.high must be in \(low, 1\] \(low=0.9\)"),
    (dict(domains=(A,), weights=(1,), curriculum={"windw": 3}), "tasks.curriculum: unknown"),
])
def test_bad_configs_name_the_field(fields, match):
  with pytest.raises(ValueError, match=match):
    from_section(TaskConfig, fields, "tasks")


def test_difficulty_not_a_level_of_a_domain_is_an_error():
  with pytest.raises(ValueError, match=r"tasks.difficulties=\(5, 6\): has levels \[6\] that domain"):
    _mixture(domains=(A,), weights=(1,), difficulties=(5, 6))


def test_per_domain_levels_and_demonstration_levels():
  mixture = _mixture(domains=(A, B), weights=(1, 1), difficulties=(1, 2),
                     domain_difficulties={B: (3, 4, 5)}, demo_difficulties={A: (1,), B: (3, 4)},
                     heldout_size=64)
  assert mixture.levels == {A: (1, 2), B: (3, 4, 5)}
  assert mixture.demo_levels == {A: (1,), B: (3, 4)}
  seen = lambda tasks: {(t.domain, t.difficulty) for t in tasks}
  # SFT demonstrations come from the demonstrated levels only; RL and held-out span them all.
  assert seen(mixture.sample(0, 256, stream="sft")) == {(A, 1), (B, 3), (B, 4)}
  every = {(A, 1), (A, 2), (B, 3), (B, 4), (B, 5)}
  assert seen(mixture.sample(0, 256)) == every and seen(mixture.heldout) == every
  heldout = {t.task_id for t in mixture.heldout}
  assert not heldout & {t.task_id for t in mixture.sample(1, 256, stream="sft")}
  # Unlisted domains have demonstrations at every level.
  assert _mixture(domains=(A, B), weights=(1, 1), difficulties=(1, 2),
                  demo_difficulties={A: (2,)}).demo_levels == {A: (2,), B: (1, 2)}


@pytest.mark.parametrize("fields, match", [
    (dict(demo_difficulties={"nope": (1,)}), "tasks.demo_difficulties must name configured"),
    (dict(domain_difficulties={A: ()}), "tasks.domain_difficulties must give each"),
])
def test_bad_level_maps_name_the_field(fields, match):
  with pytest.raises(ValueError, match=match):
    from_section(TaskConfig, dict(domains=(A,), weights=(1,), **fields), "tasks")


def test_demonstration_level_outside_the_domain_levels_is_an_error():
  with pytest.raises(ValueError, match=r"demo_difficulties\['.*LevelsA'\] has \[3\]"):
    _mixture(domains=(A,), weights=(1,), difficulties=(1, 2), demo_difficulties={A: (3,)})
  with pytest.raises(ValueError, match=r"tasks.domain_difficulties=\(7,\): has levels \[7\]"):
    _mixture(domains=(A,), weights=(1,), domain_difficulties={A: (7,)})
