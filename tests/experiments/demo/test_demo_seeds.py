"""Demo over seeds: the spread statistics by hand, and reproducibility of a seed.

The end-to-end test runs the tiny demo for seeds 0 and 1 (side by side,
--jobs=2), then seed 0 again alone in another folder: seed 0's rows (the
SFT control arm's included) and every logged training number (SFT, RL and
control metrics, apart from timings) must match exactly, and seed 1's must
not.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from child_process import xla_flags
from experiments.demo import seed_runs, seeds
from rl_post.errors import ConfigError
from rl_post.metrics.writers import read_metrics
from run_metrics import MEASURED

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _summary(before, after, diff, by_domain=None):
  ev = lambda rate: {"completion_rate": rate, **({"by_domain": by_domain(rate)} if by_domain else {})}
  return {"evals": {"before": ev(before), "after": ev(after), "before_sampled": ev(before / 2),
                    "after_sampled": ev(after / 2)},
          "comparisons": {"": {"diff": diff, "p_value": 0.5},
                          "_sampled": {"diff": diff / 2, "p_value": 0.25}}}


def test_spread_by_hand():
  s = seeds.spread([0.1, 0.2, 0.6])
  assert s["mean"] == pytest.approx(0.3) and (s["min"], s["max"]) == (0.1, 0.6)
  assert s["std"] == pytest.approx(math.sqrt((0.04 + 0.01 + 0.09) / 2))  # ddof=1
  half = 4.302652729911275 * s["std"] / math.sqrt(3)  # t_{0.975, 2}
  assert (s["ci_low"], s["ci_high"]) == pytest.approx((0.3 - half, 0.3 + half))
  one = seeds.spread([0.4])
  assert one["mean"] == 0.4 and one["std"] is None and one["ci_low"] is None
  with pytest.raises(ValueError, match="one or more finite values"):
    seeds.spread([])
  with pytest.raises(ValueError, match="one or more finite values"):
    seeds.spread([0.1, float("nan")])


def _pretrained_summary(before, after, control, rl_s):
  """A summary.json as the pretrained pipeline writes it: demo tables without a
  demonstrations split, the pretrained arm names, sampled macro rates."""
  import numpy as np
  from experiments.demo import demo_tables
  domain, level = ["a", "a", "b", "b"], [1, 1, 1, 1]
  ev = lambda c: {"correct": np.array(c, bool), "domain": domain, "difficulty": np.array(level)}
  arms = {"before": ev(before), "after": ev(after), "control": ev(control)}
  tables = demo_tables.demo_tables(arms, None)
  tables["macro_sampled"] = {arm: demo_tables.macro_rate(np.array(c, bool) & np.array(
      [1, 0, 1, 0], bool), np.array(domain)) for arm, c in
                             zip(demo_tables.ARMS, (before, after, control))}
  tables["names"] = demo_tables.arm_names({"before": "pretrained start",
                                           "control": "RFT control"})
  summary = _summary(np.mean(before), np.mean(after), np.mean(after) - np.mean(before))
  summary["evals"]["control"] = {"completion_rate": float(np.mean(control))}
  summary["evals"]["control_sampled"] = {"completion_rate": float(np.mean(control)) / 2}
  summary["demo"] = dict(tables, wall_s={"rl": rl_s, "control": rl_s / 2})
  return summary


def test_pretrained_rows_name_the_arms_and_compare_rl_with_control_on_all_problems():
  rows = [seeds.seed_row(0, _pretrained_summary([0, 0, 1, 0], [1, 1, 1, 0], [1, 0, 1, 0], 60)),
          seeds.seed_row(1, _pretrained_summary([0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 1, 0], 80))]
  assert rows[0]["after_vs_control"] == pytest.approx(0.25)
  assert rows[1]["after_vs_control"] == pytest.approx(0.75)
  assert rows[0]["unseen_before"] is None and rows[0]["macro_sampled_diff"] == pytest.approx(0.25)
  agg = seeds.aggregate(rows)
  assert agg["after_vs_control"]["mean"] == pytest.approx(0.5)
  assert "unseen_before" not in agg
  md = seeds.render_markdown("t", rows, agg, "python x.py", {"cpu_count": 2})
  assert "## pretrained start vs RL vs RFT control" in md
  assert "| seed | macro pretrained start | macro RL | macro RFT control | macro Δ pp |" in md
  assert "| 0 | 25.0 | 75.0 | 50.0 | +50.0 | 25.0 | 50.0 | +25.0 | +25.0 | 60 | 30 |" in md
  assert "| after_vs_control | +50.0 ± 35.4" in md
  assert "| domain | level | pretrained start | after RL | RFT control |" in md
  assert "demos" not in md and "unseen" not in md and "wall_s" not in md


def test_rows_aggregate_and_markdown():
  by_domain = lambda rate: {"a": {"completion_rate": rate}, "b": {"completion_rate": 1 - rate}}
  rows = [seeds.seed_row(0, _summary(0.2, 0.5, 0.3, by_domain)),
          seeds.seed_row(1, _summary(0.4, 0.6, 0.2, by_domain))]
  assert rows[0]["after_sampled"] == 0.25 and rows[0]["diff_sampled"] == 0.15
  assert rows[1]["by_domain"]["b"]["before"] == pytest.approx(0.6)
  agg = seeds.aggregate(rows)
  assert agg["before"]["mean"] == pytest.approx(0.3)
  assert agg["diff"]["std"] == pytest.approx(math.sqrt(0.005))
  assert agg["by_domain"]["b"]["after"]["mean"] == pytest.approx(0.45)
  md = seeds.render_markdown("t", rows, agg, "python x.py", {"cpu_count": 2})
  assert "| 0 | 20.0 | 50.0 | +30.0 | 0.5 | 10.0 | 25.0 | +15.0 | 0.25 |" in md
  assert "| before | 30.0 ± 14.1 [" in md and "| diff | +25.0 ± 7.1 [" in md
  assert "| b | 70.0 ± 14.1 [" in md and "Machine: cpu_count=2" in md
  with pytest.raises(ValueError, match="repeat a seed"):
    seeds.aggregate([rows[0], rows[0]])
  with pytest.raises(ValueError, match=r"seed 3: report summary lacks \['after_sampled'"):
    bad = _summary(0.1, 0.2, 0.1)
    del bad["evals"]["after_sampled"]
    seeds.seed_row(3, bad)


@pytest.mark.parametrize("bad, match", [([], "at least one seed"), (["1", "x"], "integers >= 0"),
                                        (["-1"], "integers >= 0"), (["0", "0"], "repeats")])
def test_check_seeds_errors(bad, match):
  with pytest.raises(ConfigError, match=match):
    seed_runs.check_seeds(bad)
  assert seed_runs.check_seeds(["2", " 0"]) == [2, 0]


def test_a_recorded_seed_counts_only_with_the_same_config(tmp_path):
  assert seed_runs._finished(str(tmp_path), {"seed": 0}) is None  # nothing recorded
  with open(tmp_path / seed_runs.SEED_RESULT, "w") as f:
    json.dump({"config": {"seed": 0, "rl": {"num_steps": 2, "buckets": (64, 128)}},
               "wall_s": 3.0, "summary": {}}, f)
  same = {"seed": 0, "rl": {"num_steps": 2, "buckets": (64, 128)}}  # tuples as a config has
  assert seed_runs._finished(str(tmp_path), same)["wall_s"] == 3.0
  assert seed_runs._finished(str(tmp_path), dict(same, seed=1)) is None
  assert seed_runs._finished(str(tmp_path), dict(same, rl={"num_steps": 3,
                                                           "buckets": (64, 128)})) is None


def test_jobs_must_be_positive(tmp_path):
  with pytest.raises(ConfigError, match="--jobs"):
    seed_runs.run(None, str(tmp_path), [0], jobs=0)


_TIMING_PREFIXES = MEASURED


def _training_numbers(run_dir):
  """Every logged SFT and RL metric except wall-clock timings."""
  out = {}
  for stage in ("sft", "rl", "control"):
    out[stage] = [{k: v for k, v in r.items() if not k.startswith(_TIMING_PREFIXES)}
                  for r in read_metrics(run_dir / stage)]
  return out


def _run_script(workdir, seeds, jobs=1):
  """experiments/demo_seeds.py on the tiny demo (2 RL steps) in a fresh process.

  The runs use the suite's persistent XLA compilation cache (tests/conftest.py):
  the same programs compile once, not once per seed.
  """
  assert os.environ.get("JAX_COMPILATION_CACHE_DIR"), "tests/conftest.py sets it"
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = xla_flags()
  proc = subprocess.run(
      [sys.executable, "experiments/demo_seeds.py", "--config=configs/demo.py:tiny",
       "--config.rl.num_steps=2", f"--seeds={seeds}", f"--workdir={workdir}", f"--jobs={jobs}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| field | value |" in proc.stdout
  return json.load(open(workdir / "seeds.json"))


def test_tiny_demo_over_seeds_is_reproducible(tmp_path):
  # Seeds 0 and 1 side by side in two processes, then seed 0 alone in this one's child.
  first = _run_script(tmp_path / "a", "0,1", jobs=2)
  again = _run_script(tmp_path / "b", "0")

  assert [r["seed"] for r in first["rows"]] == [0, 1]
  assert first["aggregate"]["after"]["n"] == 2 and first["machine"]["cpu_count"] >= 1
  assert "family" in first["machine"]["cpu"]  # which CPU: the figures move with it
  assert "--seeds=0,1" in first["command"]
  assert "| 1 |" in open(tmp_path / "a" / "seeds.md").read()
  strip = lambda row: {k: v for k, v in row.items() if not k.endswith("wall_s")}
  assert strip(again["rows"][0]) == strip(first["rows"][0])
  # A seed that finished with the same config is reused as recorded, not run again.
  report = tmp_path / "b" / "seed_0" / "report" / "summary.json"
  written = report.stat().st_mtime_ns
  as_text = lambda rows: json.dumps(rows, sort_keys=True)  # NaN fields compare as text
  assert as_text(_run_script(tmp_path / "b", "0")["rows"]) == as_text(again["rows"])
  assert report.stat().st_mtime_ns == written
  row = first["rows"][0]
  assert {"control", "macro_after", "macro_control", "unseen_after_vs_control",
          "cells"} <= set(row)
  assert {"macro_diff", "unseen_after_vs_control", "cells"} <= set(first["aggregate"])
  assert "SFT start vs RL vs SFT control" in open(tmp_path / "a" / "seeds.md").read()
  seed0 = _training_numbers(tmp_path / "a" / "seed_0")
  assert len(seed0["rl"]) == 2 and seed0["sft"] and seed0["control"]
  assert _training_numbers(tmp_path / "b" / "seed_0") == seed0
  assert _training_numbers(tmp_path / "a" / "seed_1") != seed0
  for name in ("summary.json", "pass_rate.png", "curves.png", "difficulty.png"):
    assert (tmp_path / "b" / "seed_0" / "report" / name).stat().st_size > 0, name
  for name in ("seeds_arms.png", "seeds_curves.png"):  # the plots over seeds
    assert (tmp_path / "a" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
