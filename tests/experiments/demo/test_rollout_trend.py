"""Rollout pass rate per (domain, level) pooled over windows of steps."""

import json
import os
import subprocess
import sys

import pytest

from experiments.demo import rollout_trend

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _record(step, **cells):
  record = {"step": step, "loss": 0.1, "domain/a/pass_rate": 0.5}  # not a per-level key
  for name, (rate, count) in cells.items():
    domain, level = name.split("_")
    record[f"domain/{domain}/difficulty/{level}/pass_rate"] = rate
    record[f"domain/{domain}/difficulty/{level}/count"] = count
  return record


RECORDS = [_record(1, a_2=(0.5, 8), b_1=(0.0, 4)),
           _record(2, a_2=(1.0, 24)),
           _record(3, a_2=(0.25, 8), b_1=(1.0, 4)),
           {"step": 4, "domain/a/difficulty/2/pass_rate": None, "domain/a/difficulty/2/count": 8},
           _record(5, b_1=(0.5, 2))]


def test_pass_rates_are_pooled_by_rollout_count_per_window():
  trend = rollout_trend.windowed_pass_rates(RECORDS, window=2)
  assert list(trend) == [("a", 2), ("b", 1)]
  # steps 1-2: (0.5 * 8 + 1.0 * 24) / 32; steps 3-4: step 4's None rate is skipped
  assert trend[("a", 2)] == [(1, 2, 28 / 32, 32), (3, 4, 0.25, 8), (5, 5, None, 0)]
  assert trend[("b", 1)] == [(1, 2, 0.0, 4), (3, 4, 1.0, 4), (5, 5, 0.5, 2)]
  whole = rollout_trend.windowed_pass_rates(RECORDS, window=10)
  assert whole[("a", 2)] == [(1, 5, (4 + 24 + 2) / 40, 40)]
  assert rollout_trend.windowed_pass_rates([{"loss": 1.0}], window=3) == {}
  with pytest.raises(ValueError, match="window must be >= 1"):
    rollout_trend.windowed_pass_rates(RECORDS, window=0)


def test_table_marks_windows_without_rollouts():
  table = rollout_trend.trend_table_md(rollout_trend.windowed_pass_rates(RECORDS, 2), "T")
  assert "| domain | level | steps 1-2 | steps 3-4 | steps 5-5 | rollouts |" in table
  assert "| a | 2 | 87.5 | 25.0 | - | 40 |" in table
  assert "| b | 1 | 0.0 | 100.0 | 50.0 | 10 |" in table
  assert "no such per-domain or per-level rates" in rollout_trend.trend_table_md({}, "T")


def test_a_component_is_pooled_per_domain():
  records = [{"step": 1, "domain/a/process": 0.5, "domain/a/count": 8,
              "domain/a/difficulty/2/process": 9.0},  # not a per-domain key
             {"step": 2, "domain/a/process": 0.0, "domain/a/count": 24,
              "domain/b/process": 1.0, "domain/b/count": 4}]
  trend = rollout_trend.windowed_pass_rates(records, window=2, component="process")
  assert trend == {("a", None): [(1, 2, 4 / 32, 32)], ("b", None): [(1, 2, 1.0, 4)]}
  assert "| a | all | 12.5 | 32 |" in rollout_trend.trend_table_md(trend)
  assert rollout_trend.logged_components(records) == {"process"}
  assert rollout_trend.logged_components(RECORDS) == {"pass_rate"}


def test_script_prints_one_table_per_run(tmp_path):
  for name in ("r0", "r1"):
    (tmp_path / name).mkdir()
    with open(tmp_path / name / "metrics.jsonl", "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in RECORDS)
  runs = f"{tmp_path / 'r0'},{tmp_path / 'r1'}"
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "rollout_trend.py"),
                        f"--runs={runs}", "--window=2"], capture_output=True, text=True,
                       check=True).stdout
  assert out.count("| a | 2 | 87.5 | 25.0 | - | 40 |") == 2 and str(tmp_path / "r1") in out
  assert "Rollout pass rate (%)" in out
  unknown = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "rollout_trend.py"),
                            f"--runs={runs}", "--component=proces"], capture_output=True,
                           text=True)
  assert unknown.returncode == 2
  assert "--component='proces': is not logged per domain in these runs; they log: pass_rate" \
      in unknown.stderr
  missing = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "rollout_trend.py"),
                            f"--runs={tmp_path / 'nope'}"], capture_output=True, text=True)
  assert missing.returncode != 0 and "no metrics file" in missing.stderr
