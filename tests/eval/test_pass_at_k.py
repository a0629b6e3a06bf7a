"""pass@k (unbiased estimator) against brute-force enumeration of k-subsets."""

import itertools
from fractions import Fraction

import numpy as np
import pytest

from rl_post.eval import stats


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
  """Fraction of the C(n, k) size-k subsets of n samples (c correct) with a correct one."""
  samples = [True] * c + [False] * (n - c)
  subsets = list(itertools.combinations(range(n), k))
  hits = sum(any(samples[i] for i in subset) for subset in subsets)
  return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
def test_matches_enumeration_for_every_c_and_k(n):
  for k in range(1, n + 1):
    for c in range(n + 1):
      want = brute_force_pass_at_k(n, c, k)
      assert stats.pass_at_k(n, c, k) == pytest.approx(float(want), abs=1e-12), (n, c, k)


def test_vectorised_per_problem_matches_enumeration():
  rng = np.random.default_rng(0)
  n = 9
  c_P = rng.integers(0, n + 1, 40)
  for k in (1, 3, 9):
    want_P = [float(brute_force_pass_at_k(n, int(c), k)) for c in c_P]
    np.testing.assert_allclose(stats.pass_at_k(n, c_P, k), want_P, atol=1e-12)


def test_pass_at_1_is_the_fraction_correct():
  c_P = np.array([0, 1, 5, 8])
  np.testing.assert_allclose(stats.pass_at_k(8, c_P, 1), c_P / 8)


def test_large_n_stays_finite():
  # C(1000, 500) overflows floats; the product form does not.
  assert stats.pass_at_k(1000, 1, 500) == pytest.approx(0.5)
  assert stats.pass_at_k(1000, 3, 10) == pytest.approx(float(closed_form(1000, 3, 10)))


def closed_form(n, c, k):
  from math import comb
  return 1 - Fraction(comb(n - c, k), comb(n, k))


@pytest.mark.parametrize("n,c,k,match", [
    (4, 1, 5, "num_samples must be >= k=5"),
    (4, 1, 0, "k must be >= 1"),
    (4, 5, 2, "num_correct must be in"),
    (4, -1, 2, "num_correct must be in"),
    (4.0, 1, 2, "num_samples must be integers"),
])
def test_bad_inputs(n, c, k, match):
  with pytest.raises(ValueError, match=match):
    stats.pass_at_k(n, c, k)
