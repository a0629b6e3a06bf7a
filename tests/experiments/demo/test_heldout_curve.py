"""Held-out greedy completion against RL steps, over seeds (experiments.demo.heldout_curve)."""

import json
import os
import subprocess
import sys

import pytest

from experiments.demo import heldout_curve
from rl_post.errors import ConfigError, MissingInputError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "experiments", "heldout_curve.py")


def _eval_record(step, a2, a102, b1):
  """A trainer record with a held-out evaluation: domain a (levels 2, 102), domain b."""
  a = (a2 * 3 + a102 * 1) / 4  # 3 problems at level 2, 1 at level 102
  return {"step": step, "loss": 0.1, "eval/pass_rate": (4 * a + 2 * b1) / 6,
          "eval/a/pass_rate": a, "eval/b/pass_rate": b1,
          "eval/a/difficulty_2/pass_rate": a2, "eval/a/difficulty_102/pass_rate": a102,
          "eval/b/difficulty_1/pass_rate": b1,
          "eval_sampled/a/pass_rate": 0.0,  # the sampled evaluation is not this table's
          "domain/a/difficulty/2/pass_rate": 0.9}  # a rollout rate, not a held-out one


def _summary(start, control, after=(0.0, 0.0, 0.0)):
  """A demo report's summary.json: (a level 2, a level 102, b level 1) per arm."""
  cells = [{"domain": "a", "level": 2, "demonstrations": True},
           {"domain": "a", "level": 102, "demonstrations": False},
           {"domain": "b", "level": 1, "demonstrations": True}]
  for cell, s, c, a in zip(cells, start, control, after):
    cell.update(before=s, control=c, after=a)
  by_domain = lambda r: {"a": (3 * r[0] + r[1]) / 4, "b": r[2]}  # noqa: E731
  return {"demo": {"macro": {"before": {"by_domain": by_domain(start)},
                             "control": {"by_domain": by_domain(control)},
                             "after": {"by_domain": by_domain(after)}},
                   "cells": cells}}


def _demo_workdir(root, name, records, summary):
  workdir = root / name
  (workdir / "rl").mkdir(parents=True)
  (workdir / "report").mkdir()
  with open(workdir / "rl" / "metrics.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in [{"step": 1, "loss": 0.2}, *records])
  with open(workdir / "report" / "summary.json", "w") as f:
    json.dump(summary, f)
  return str(workdir)


def test_points_keep_only_held_out_greedy_rates():
  points = heldout_curve.rl_points([{"step": 1, "loss": 0.2}, _eval_record(40, 1.0, 0.0, 0.5)])
  assert points == {40: {"domains": {"a": 0.75, "b": 0.5},
                         "cells": {"a/2": 1.0, "a/102": 0.0, "b/1": 0.5}}}


def test_curve_over_runs_has_start_steps_and_control(tmp_path):
  runs = [heldout_curve.read_workdir(_demo_workdir(
              tmp_path, "s0", [_eval_record(40, 0.5, 0.0, 0.0), _eval_record(80, 1.0, 0.0, 0.5)],
              _summary(start=(0.5, 0.0, 0.0), control=(1.0, 0.0, 1.0)))),
          heldout_curve.read_workdir(_demo_workdir(
              tmp_path, "s1", [_eval_record(40, 0.5, 1.0, 0.0), _eval_record(80, 1.0, 1.0, 0.5)],
              _summary(start=(0.5, 1.0, 0.0), control=(1.0, 1.0, 1.0))))]
  rows = heldout_curve.curve(runs)
  assert [r["point"] for r in rows] == ["SFT start", "RL step 40", "RL step 80", "SFT control"]
  # macro = mean over domains of the domain rates: step 80, a = 0.75 / 1.0, b = 0.5
  step80 = rows[2]
  assert step80["macro"]["mean"] == pytest.approx((0.625 + 0.75) / 2)
  assert step80["macro"]["std"] == pytest.approx(0.125 / 2 ** 0.5)
  assert step80["cells"]["a/102"]["mean"] == 0.5 and step80["cells"]["b/1"]["std"] == 0.0
  assert rows[0]["macro"]["mean"] == pytest.approx((0.375 + 0.625) / 2 / 2)
  assert rows[-1]["unseen"] == ["a/102"]
  table = heldout_curve.curve_markdown(rows, "T")
  assert "| point | runs | macro | a/2 | a/102 (RL only) | b/1 |" in table
  assert "| RL step 80 | 2 | 68.8 ± 8.8 | 100.0 ± 0.0 | 50.0 ± 70.7 | 50.0 ± 0.0 |" in table
  assert "| SFT control | 2 | 93.8 ± 8.8 |" in table  # a = 0.75 / 1.0, b = 1.0


def test_the_demo_evaluation_after_rl_is_the_last_steps_point(tmp_path):
  # The demo's trainer skips its own evaluation after the last step (rl.eval_at_end off):
  # the report's "after" arm, the same held-out problems greedily, is that step's point.
  records = [_eval_record(40, 0.5, 0.0, 0.0), {"step": 80, "loss": 0.1}]
  run = heldout_curve.read_workdir(_demo_workdir(
      tmp_path, "s0", records, _summary((0.5, 0.0, 0.0), (1.0, 0.0, 1.0), after=(1.0, 1.0, 0.5))))
  assert sorted(run["rl"]) == [40, 80]
  assert run["rl"][80] == {"domains": {"a": 1.0, "b": 0.5},
                           "cells": {"a/2": 1.0, "a/102": 1.0, "b/1": 0.5}}
  # Where the trainer did evaluate the last step, its own record stands.
  both = heldout_curve.read_workdir(_demo_workdir(
      tmp_path, "s1", [_eval_record(80, 0.5, 0.0, 0.0)],
      _summary((0.5, 0.0, 0.0), (1.0, 0.0, 1.0), after=(1.0, 1.0, 1.0))))
  assert both["rl"][80]["cells"]["a/102"] == 0.0
  # No periodic evaluation at all: the demo's after-RL point alone makes the curve.
  only_end = heldout_curve.read_workdir(_demo_workdir(
      tmp_path, "s2", [], _summary((0.5, 0.0, 0.0), (1.0, 0.0, 1.0), after=(1.0, 1.0, 0.5))))
  rows = heldout_curve.curve([only_end])
  assert [r["point"] for r in rows] == ["SFT start", "RL step 1", "SFT control"]


def test_runs_must_share_steps_and_have_evaluations(tmp_path):
  one = heldout_curve.read_workdir(_demo_workdir(
      tmp_path, "s0", [_eval_record(40, 0.5, 0.0, 0.0)], _summary((0, 0, 0), (0, 0, 0))))
  other = heldout_curve.read_workdir(_demo_workdir(
      tmp_path, "s1", [_eval_record(50, 0.5, 0.0, 0.0)], _summary((0, 0, 0), (0, 0, 0))))
  with pytest.raises(ConfigError, match="share no evaluated RL step"):
    heldout_curve.curve([one, other])
  with pytest.raises(ConfigError, match="names no run"):
    heldout_curve.curve([])
  rl_only = tmp_path / "rl_only"
  rl_only.mkdir()
  (rl_only / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.2}) + "\n")
  with pytest.raises(MissingInputError, match="rl.eval_every"):
    heldout_curve.read_workdir(str(rl_only))
  with pytest.raises(MissingInputError, match="--workdirs"):
    heldout_curve.read_workdir(str(tmp_path / "nope"))


def test_script_prints_the_table_and_writes_json(tmp_path):
  workdir = _demo_workdir(tmp_path, "s0", [_eval_record(40, 1.0, 0.0, 0.5)],
                          _summary((0.5, 0.0, 0.0), (1.0, 0.0, 1.0)))
  out = tmp_path / "curve.json"
  result = subprocess.run([sys.executable, SCRIPT, f"--workdirs={workdir}", f"--out={out}"],
                          capture_output=True, text=True, check=True).stdout
  assert "| RL step 40 | 1 | 62.5 | 100.0 | 0.0 | 50.0 |" in result
  assert [r["point"] for r in json.loads(out.read_text())["rows"]] == [
      "SFT start", "RL step 40", "SFT control"]
  (tmp_path / "bad" / "rl").mkdir(parents=True)
  (tmp_path / "bad" / "rl" / "metrics.jsonl").write_text(
      json.dumps(_eval_record(40, 1.0, 0.0, 0.5)) + "\n")
  (tmp_path / "bad" / "report").mkdir()
  (tmp_path / "bad" / "report" / "summary.json").write_text("{not json")
  bad = subprocess.run([sys.executable, SCRIPT, f"--workdirs={tmp_path / 'bad'}"],
                       capture_output=True, text=True)
  assert bad.returncode == 2 and "summary.json" in bad.stderr and "cannot be read" in bad.stderr
