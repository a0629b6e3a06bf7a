"""Demo tables: SFT start vs RL vs control, by hand on made-up per-problem evals."""

import math

import numpy as np
import pytest

from experiments.demo import demo_tables

DOMAIN = ["a", "a", "a", "a", "b", "b"]
LEVEL = [1, 1, 2, 2, 1, 1]


def _ev(correct):
  return {"correct": np.array(correct, bool), "domain": DOMAIN, "difficulty": np.array(LEVEL)}


def _evals():
  return {"before": _ev([1, 0, 0, 0, 0, 0]), "after": _ev([1, 1, 1, 1, 1, 0]),
          "control": _ev([1, 1, 0, 0, 1, 0])}


def test_tables_by_hand():
  t = demo_tables.demo_tables(_evals(), {"a": (1,)})  # b: demonstrations at every level
  assert t["macro"]["before"]["rate"] == pytest.approx((0.25 + 0.0) / 2)
  assert t["macro"]["after"]["rate"] == pytest.approx((1.0 + 0.5) / 2)
  assert t["macro_diff"] == pytest.approx(0.75 - 0.125)
  # Normal interval with shrunk p: a (k=1, n=4) -> 1/3, b (k=0, n=2) -> 1/4.
  half = 1.96 * math.sqrt((1 / 3) * (2 / 3) / 4 + 0.25 * 0.75 / 2) / 2
  assert t["macro"]["before"]["ci_high"] == pytest.approx(0.125 + half)
  assert t["macro"]["before"]["ci_low"] == 0.0  # clipped
  cells = {(c["domain"], c["level"]): c for c in t["cells"]}
  assert cells[("a", 2)]["demonstrations"] is False and cells[("a", 1)]["demonstrations"]
  assert cells[("a", 2)] | {} == {"domain": "a", "level": 2, "demonstrations": False, "n": 2,
                                  "before": 0.0, "after": 1.0, "control": 0.0}
  assert t["unseen"]["n"] == 2 and t["seen"]["n"] == 4
  assert t["unseen"]["after_vs_control"]["diff"] == 1.0
  assert t["seen"]["after_vs_control"]["diff"] == pytest.approx(0.0)
  assert t["seen"]["after_vs_before"]["num_improved"] == 2
  md = demo_tables.render_markdown(t, {"rl": 10.0, "control": 12.0})
  assert "| a | 2 | no | 2 | 0.0 | 100.0 | 0.0 |" in md
  assert "RL 10 s, SFT control 12 s" in md and "**levels without demonstrations** (n=2)" in md


def test_all_levels_demonstrated_has_no_unseen_comparison():
  t = demo_tables.demo_tables(_evals(), {})
  assert t["unseen"] == {"n": 0, "after_vs_control": None, "after_vs_before": None}
  assert "levels without demonstrations" not in demo_tables.render_markdown(t, {})


def test_a_start_without_demonstrations_compares_all_problems_paired():
  t = demo_tables.demo_tables(_evals(), None)  # a pretrained start: no level had demos
  assert "unseen" not in t and "seen" not in t
  assert {c["demonstrations"] for c in t["cells"]} == {None}
  assert t["all"]["n"] == 6 and t["all"]["after"] == pytest.approx(5 / 6)
  assert t["all"]["after_vs_control"]["diff"] == pytest.approx(2 / 6)
  assert t["all"]["after_vs_before"]["num_improved"] == 4
  md = demo_tables.render_markdown(t, {"rl": 1.0, "control": 2.0},
                                   {"before": "pretrained start", "control": "RFT control"})
  assert "| domain | level | n | pretrained start | after RL | RFT control |" in md
  assert "| a | 2 | 2 | 0.0 | 100.0 | 0.0 |" in md and "demos" not in md
  assert "**all held-out problems** (n=6)" in md and "RL - control +33.3 pp" in md


def test_bad_inputs():
  evals = _evals()
  del evals["control"]
  with pytest.raises(ValueError, match=r"missing \['control'\]"):
    demo_tables.demo_tables(evals, {})
  evals = _evals()
  evals["after"]["difficulty"] = np.array([1, 1, 1, 2, 1, 1])
  with pytest.raises(ValueError, match="'after' must list the same problems"):
    demo_tables.demo_tables(evals, {})
