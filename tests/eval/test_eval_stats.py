"""Tests for rl_post.eval.stats against hand-computed numbers."""

import math

import numpy as np
import pytest

from rl_post.eval import stats


def test_wilson_interval_matches_hand_computation():
  # 8/10, z = 1.959964: center = (0.8 + z^2/20) / (1 + z^2/10) = 0.716737,
  # half = z * sqrt(0.016 + z^2/400) / (1 + z^2/10) = 0.226580.
  low, high = stats.wilson_interval(8, 10)
  assert low == pytest.approx(0.490157, abs=1e-5)
  assert high == pytest.approx(0.943318, abs=1e-5)


def test_wilson_interval_edges_stay_in_unit_interval():
  # 0/10: low = 0, high = (z^2/10) / (1 + z^2/10) = 0.277533.
  low, high = stats.wilson_interval(0, 10)
  assert low == 0.0
  assert high == pytest.approx(0.277533, abs=1e-5)
  low, high = stats.wilson_interval(10, 10)
  assert high == 1.0
  assert low == pytest.approx(1 - 0.277533, abs=1e-5)


def test_wilson_interval_narrows_with_lower_confidence():
  low95, high95 = stats.wilson_interval(30, 100, 0.95)
  low80, high80 = stats.wilson_interval(30, 100, 0.80)
  assert low95 < low80 < 0.3 < high80 < high95


@pytest.mark.parametrize("args, match", [
    ((5, 0), "trials must be > 0"),
    ((11, 10), r"successes must be in \[0, trials=10\]"),
    ((-1, 10), "successes must be in"),
    ((1.5, 10), "successes must be an integer"),
    ((1, 10, 1.0), "confidence must be a float in"),
])
def test_wilson_interval_bad_inputs(args, match):
  with pytest.raises(ValueError, match=match):
    stats.wilson_interval(*args)


def _paired_example():
  # 1 regressed, 6 improved, 2 both right, 1 both wrong (N = 10).
  before = np.array([1, 0, 0, 0, 0, 0, 0, 1, 1, 0], dtype=bool)
  after = np.array([0, 1, 1, 1, 1, 1, 1, 1, 1, 0], dtype=bool)
  return before, after


def test_paired_difference_ci_matches_hand_computation():
  before, after = _paired_example()
  out = stats.paired_difference_ci(before, after)
  # d = [-1, 1 x6, 0 x3]: mean 0.5, var = (2.25 + 6*0.25 + 3*0.25) / 9 = 0.5,
  # se = sqrt(0.5 / 10) = 0.223607, half = 1.959964 * se = 0.438261.
  assert out["diff"] == pytest.approx(0.5)
  assert out["low"] == pytest.approx(0.061739, abs=1e-5)
  assert out["high"] == pytest.approx(0.938261, abs=1e-5)
  # McNemar: b=6, c=1, p = 2 * (C(7,0) + C(7,1)) / 2^7 = 16 / 128.
  assert out["p_value"] == pytest.approx(0.125)
  assert (out["n"], out["num_improved"], out["num_regressed"]) == (10, 6, 1)


def test_paired_difference_no_change_has_p_value_one():
  x = np.array([True, False, True, False])
  out = stats.paired_difference_ci(x, x)
  assert out["diff"] == 0.0 and out["low"] == 0.0 and out["high"] == 0.0
  assert out["p_value"] == 1.0


def test_mcnemar_p_value_is_symmetric_and_capped():
  assert stats.mcnemar_p_value(3, 3) == 1.0
  # b=0, c=5: p = 2 * 1 / 32.
  assert stats.mcnemar_p_value(0, 5) == pytest.approx(1 / 16)
  assert stats.mcnemar_p_value(5, 0) == stats.mcnemar_p_value(0, 5)
  # Large counts must not overflow.
  assert 0.0 < stats.mcnemar_p_value(2000, 2100) < 1.0


def test_paired_difference_bad_inputs():
  before, after = _paired_example()
  with pytest.raises(ValueError, match=r"same problems, got shapes \(10,\) and \(9,\)"):
    stats.paired_difference_ci(before, after[:9])
  with pytest.raises(ValueError, match="must be a boolean array"):
    stats.paired_difference_ci(before.astype(np.float32), after)
  with pytest.raises(ValueError, match="before_correct must be 1-D"):
    stats.paired_difference_ci(before.reshape(2, 5), after)
  with pytest.raises(ValueError, match="at least 2 paired problems"):
    stats.paired_difference_ci(before[:1], after[:1])


def test_pass_at_k_hand_values():
  assert stats.pass_at_k(5, 2, 1) == pytest.approx(0.4)
  # 1 - C(3,2)/C(5,2) = 1 - 3/10.
  assert stats.pass_at_k(5, 2, 2) == pytest.approx(0.7)
  # n - c < k: every size-k subset contains a correct sample.
  assert stats.pass_at_k(4, 3, 2) == 1.0
  assert stats.pass_at_k(4, 0, 2) == 0.0


def test_pass_at_k_vectorised_matches_binomial_formula():
  n_P = np.array([10, 10, 20, 7, 16])
  c_P = np.array([0, 3, 19, 7, 5])
  got_P = stats.pass_at_k(n_P, c_P, 4)
  want_P = [1 - math.comb(n - c, 4) / math.comb(n, 4) for n, c in zip(n_P, c_P)]
  assert got_P.shape == (5,)
  np.testing.assert_allclose(got_P, want_P, rtol=1e-12)
  # Broadcasting a scalar n over a vector of c.
  np.testing.assert_allclose(stats.pass_at_k(10, np.array([0, 3]), 4), want_P[:2])


def test_pass_at_k_bad_inputs():
  with pytest.raises(ValueError, match="num_samples must be >= k=3"):
    stats.pass_at_k(2, 1, 3)
  with pytest.raises(ValueError, match="num_correct must be in"):
    stats.pass_at_k(np.array([4, 4]), np.array([1, 5]), 1)
  with pytest.raises(ValueError, match="k must be >= 1"):
    stats.pass_at_k(4, 1, 0)
  with pytest.raises(ValueError, match="num_correct must be integers"):
    stats.pass_at_k(4, 1.0, 1)
