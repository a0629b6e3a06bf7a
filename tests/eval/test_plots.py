"""rl_post.eval.plots: series extraction, curriculum keys, PNGs and their errors."""

import numpy as np
import pytest

from rl_post.eval import plots, report

_PNG = b"\x89PNG\r\n\x1a\n"


def _metrics():
  return [{"step": 1, "reward/mean": 0.1, "entropy": 3.0, "curriculum/math/difficulty": 1.0},
          {"step": 2, "reward/mean": None, "approx_kl_old": 0.01,
           "curriculum/countdown/difficulty": 2.0, "curriculum/math/moves": 1.0},
          {"step": 3, "reward/mean": float("nan"), "entropy": 2.5}]


def test_series_skips_missing_null_and_nan():
  steps, values = plots.series(_metrics(), "reward/mean")
  np.testing.assert_array_equal(steps, [1])
  np.testing.assert_array_equal(values, [0.1])
  steps, values = plots.series(_metrics(), "entropy")
  np.testing.assert_array_equal(steps, [1, 3])
  assert plots.series(_metrics(), "absent")[0].size == 0


def test_curriculum_domains_reads_only_difficulty_keys():
  assert plots.curriculum_domains(_metrics()) == ["countdown", "math"]
  assert plots.curriculum_domains([{"step": 0, "curriculum/math/moves": 1.0}]) == []


def test_every_plot_writes_a_png(tmp_path):
  summary = report.summarize_eval({"correct": np.array([True, False, True]),
                                   "domain": ["a", "b", "b"]})
  writers = {
      "curves.png": lambda p: plots.plot_training_curves(p, _metrics(), title="t"),
      "difficulty.png": lambda p: plots.plot_difficulty(p, _metrics(), title="t"),
      "pass.png": lambda p: plots.plot_pass_rate_by_domain(
          p, {"greedy": (summary, summary), "sampled": (summary, summary)}, title="t"),
      "reward.png": lambda p: plots.plot_metrics(p, _metrics(), title="t"),
      "empty_curves.png": lambda p: plots.plot_training_curves(p, [], title="t"),
  }
  for name, write in writers.items():
    write(str(tmp_path / name))
    assert (tmp_path / name).read_bytes()[:8] == _PNG, name


def test_plot_errors(tmp_path):
  with pytest.raises(ValueError, match="no curriculum/<domain>/difficulty"):
    plots.plot_difficulty(str(tmp_path / "d.png"), [{"step": 0, "entropy": 1.0}], title="t")
  with pytest.raises(ValueError, match="at least one"):
    plots.plot_pass_rate_by_domain(str(tmp_path / "p.png"), {}, title="t")
  no_domain = report.summarize_eval({"correct": np.array([True])})
  with pytest.raises(ValueError, match="'greedy': both summaries need 'by_domain'"):
    plots.plot_pass_rate_by_domain(str(tmp_path / "p.png"), {"greedy": (no_domain, no_domain)},
                                   title="t")
  assert not list(tmp_path.iterdir())
