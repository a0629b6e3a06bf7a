"""Tests for rl_post.eval.report: files written, numbers in the summaries."""

import json

import numpy as np
import pytest

from rl_post.eval import report, stats


def _evals():
  # Same 10 problems before/after: 1 regressed, 6 improved (see test_eval_stats).
  domain = ["math"] * 6 + ["code"] * 4
  difficulty = np.array([1, 1, 2, 2, 3, 3, 1, 2, 3, 3])
  before = np.array([1, 0, 0, 0, 0, 0, 0, 1, 1, 0], dtype=bool)
  after = np.array([0, 1, 1, 1, 1, 1, 1, 1, 1, 0], dtype=bool)
  return {
      "before": {"correct": before, "domain": domain, "difficulty": difficulty},
      "after": {"correct": after, "domain": domain, "difficulty": difficulty},
  }


def _metrics(num_steps=30):
  out = []
  for step in range(num_steps):
    out.append({"step": step, "reward/mean": step / num_steps,
                "pass_rate/math": min(1.0, step / 20), "kl": 0.01, "entropy": 2.0 - step / 30,
                "curriculum/math/difficulty": 1.0 + step / 15})
  out[3]["reward/mean"] = None  # A non-finite value written as null.
  return out


def test_write_report_files_and_numbers(tmp_path):
  paths = report.write_report(tmp_path / "report", metrics=_metrics(),
                              evals=_evals(), title="toy run")
  plot_files = {"reward_plot": "reward.png", "curves_plot": "curves.png",
                "pass_rate_plot": "pass_rate.png", "difficulty_plot": "difficulty.png"}
  assert set(paths) == {*plot_files, "summary_md", "summary_json"}
  assert sorted(p.name for p in (tmp_path / "report").iterdir()) == sorted(
      [*plot_files.values(), "summary.md", "summary.json"])
  for key, name in plot_files.items():
    assert paths[key] == str(tmp_path / "report" / name)
    with open(paths[key], "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n", key

  summary = json.loads(open(paths["summary_json"]).read())
  after = summary["evals"]["after"]
  assert (after["n"], after["num_correct"], after["completion_rate"]) == (10, 8, 0.8)
  assert (after["ci_low"], after["ci_high"]) == pytest.approx(stats.wilson_interval(8, 10))
  # after: math solved 5/6, code 3/4; difficulty 1: 2/3, 2: 3/3, 3: 3/4.
  assert {d: s["num_correct"] for d, s in after["by_domain"].items()} == {"code": 3, "math": 5}
  assert {d: (s["num_correct"], s["n"]) for d, s in after["by_difficulty"].items()} == {
      "1": (2, 3), "2": (3, 3), "3": (3, 4)}
  cmp = summary["before_vs_after"]
  assert cmp["diff"] == pytest.approx(0.5) and cmp["p_value"] == pytest.approx(0.125)
  assert summary["training"]["last_step"] == 29
  # Rolling mean of the last 10 rewards: steps 20..29 / 30.
  assert summary["training"]["final_reward_mean_rolling"] == pytest.approx(24.5 / 30)

  assert summary["plots"] == plot_files
  md = open(paths["summary_md"]).read()
  assert md.startswith("# toy run\n")
  for name in plot_files.values():
    assert f"]({name})" in md, name
  assert "| after | 80.0% | [49.0%, 94.3%] | 10 |" in md
  assert "| before | 30.0% | [10.8%, 60.3%] | 10 |" in md
  assert "| after / domain=code | 75.0% |" in md
  assert "| after / difficulty=2 | 100.0% |" in md
  assert "+50.0 pp, 95% CI [+6.2, +93.8] pp; exact McNemar p = 0.125" in md
  assert "(6 improved, 1 regressed)" in md


def test_report_without_reward_or_breakdowns(tmp_path):
  evals = {"holdout": {"correct": np.array([True, False, False, False])}}
  paths = report.write_report(tmp_path, metrics=[{"step": 0, "kl": 0.1}],
                              evals=evals, title="t")
  # No domain breakdown, no curriculum metrics: only the two step plots.
  assert set(paths) == {"reward_plot", "curves_plot", "summary_md", "summary_json"}
  summary = json.loads(open(paths["summary_json"]).read())
  assert summary["before_vs_after"] is None
  assert "by_domain" not in summary["evals"]["holdout"]
  assert summary["training"]["final_reward_mean_rolling"] is None
  md = open(paths["summary_md"]).read()
  assert "Before vs after" not in md and "| holdout | 25.0% |" in md
  assert "pass_rate.png" not in md and "difficulty.png" not in md and "](curves.png)" in md


def test_rolling_mean_hand_values():
  np.testing.assert_allclose(report.rolling_mean(np.array([1.0, 2.0, 3.0, 4.0]), 2),
                             [1.0, 1.5, 2.5, 3.5])
  np.testing.assert_allclose(report.rolling_mean(np.array([3.0, 1.0]), 10), [3.0, 2.0])
  with pytest.raises(ValueError, match="window must be an int >= 1"):
    report.rolling_mean(np.ones(3), 0)


@pytest.mark.parametrize("evals, match", [
    ({"a": {"correct": np.ones(3, bool), "by_domain": {}}}, r"evals\['a'\] has unknown keys \['by_domain'\]"),
    ({"a": {"domain": ["x"]}}, r"evals\['a'\] needs a 'correct' array"),
    ({"a": {"correct": np.ones(3)}}, "must have dtype bool, got float64"),
    ({"a": {"correct": np.ones((2, 2), bool)}}, r"non-empty 1-D array, got shape \(2, 2\)"),
    ({"a": {"correct": np.ones(3, bool), "domain": ["x", "y"]}}, r"'domain'\] must be 3 strings"),
    ({"a": {"correct": np.ones(3, bool), "difficulty": np.ones(3)}}, r"'difficulty'\] must be 3 integers"),
    ({"before": {"correct": np.ones(3, bool)}, "after": {"correct": np.ones(4, bool)}},
     "must list the same problems, got 3 and 4 problems"),
    ({"before": {"correct": np.ones(2, bool), "domain": ["x", "y"]},
      "after": {"correct": np.ones(2, bool), "domain": ["y", "x"]}}, "disagree on 'domain'"),
])
def test_write_report_bad_evals(tmp_path, evals, match):
  with pytest.raises(ValueError, match=match):
    report.write_report(tmp_path, metrics=[], evals=evals, title="t")


def test_write_report_bad_metrics(tmp_path):
  with pytest.raises(ValueError, match=r"metrics\[1\] must be a dict with a 'step' key"):
    report.write_report(tmp_path, metrics=[{"step": 0}, {"reward/mean": 1.0}],
                        evals={}, title="t")


def test_every_before_after_pair_is_compared(tmp_path):
  correct_before = np.array([True, False, False, True])
  correct_after = np.array([True, True, True, True])
  evals = {"before_sampled": {"correct": correct_before}, "after_sampled": {"correct": correct_after},
           "before": {"correct": correct_before}, "after": {"correct": correct_before}}
  paths = report.write_report(tmp_path, metrics=[{"step": 1, "reward/mean": 0.5}], evals=evals,
                              title="t")
  summary = json.load(open(paths["summary_json"]))
  assert summary["comparisons"]["_sampled"]["num_improved"] == 2
  assert summary["before_vs_after"]["diff"] == 0.0
  md = open(paths["summary_md"]).read()
  assert "before_sampled vs after_sampled** (n=4 paired problems): +50.0 pp" in md
