"""experiments.demo.seed_plots and experiments/plot_seeds.py: the demo's plots over seeds."""

import json
import os
import subprocess
import sys

import pytest

from experiments.demo import seed_plots
from rl_post.errors import MissingInputError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_PNG = b"\x89PNG\r\n\x1a\n"


def _row(seed, shift):
  cells = [dict(domain="arithmetic", level=2, demonstrations=True, n=10,
                before=0.2 + shift, after=0.3 + shift, control=0.4),
           dict(domain="arithmetic", level=102, demonstrations=False, n=8,
                before=0.0, after=0.1, control=0.05 + shift)]
  if seed == 1:
    cells.append(dict(domain="sql", level=1, demonstrations=True, n=5, before=1.0, after=1.0,
                      control=1.0))  # a cell only one seed has is left out
  return dict(seed=seed, macro_before=0.1 + shift, macro_after=0.2, macro_control=0.3,
              cells=cells)


def test_arm_groups_macro_first_then_cells_every_seed_has():
  groups = seed_plots.arm_groups([_row(0, 0.0), _row(1, 0.1)])
  assert [label for label, _ in groups] == ["all domains", "arithmetic L2",
                                            "arithmetic L102\n(no demos)"]
  assert groups[0][1] == {"before": [0.1, pytest.approx(0.2)], "after": [0.2, 0.2],
                          "control": [0.3, 0.3]}
  assert groups[1][1]["after"] == [0.3, pytest.approx(0.4)]
  assert groups[2][1]["control"] == [0.05, pytest.approx(0.15)]


def test_arm_groups_needs_the_control_arm():
  with pytest.raises(ValueError, match=r"seed rows \[3\] have no control-arm tables"):
    seed_plots.arm_groups([_row(0, 0.0), dict(seed=3, macro_after=0.1)])
  with pytest.raises(ValueError, match="at least one seed row"):
    seed_plots.arm_groups([])


def _metrics_dir(tmp_path, seed, records):
  folder = tmp_path / f"seed_{seed}" / "rl"
  folder.mkdir(parents=True)
  (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_write_draws_both_pngs_and_reports_a_missing_seed(tmp_path):
  result = {"rows": [_row(0, 0.0), _row(1, 0.1)]}
  _metrics_dir(tmp_path, 0, [{"step": 1, "reward/mean": 0.1, "kl": 0.0, "entropy": 0.3},
                             {"step": 2, "reward/mean": 0.2, "kl": 0.01, "entropy": 0.2}])
  _metrics_dir(tmp_path, 1, [{"step": 1, "reward/mean": 0.3, "approx_kl_old": 0.0}])
  paths = seed_plots.write(result, str(tmp_path / "seed_{seed}" / "rl"), str(tmp_path / "out"))
  for name in ("arms", "curves"):
    assert open(paths[name], "rb").read(8) == _PNG, name
  assert sorted(os.listdir(tmp_path / "out")) == ["seeds_arms.png", "seeds_curves.png"]

  result["rows"].append(_row(2, 0.0))
  with pytest.raises(MissingInputError, match="seed 2: no metrics file"):
    seed_plots.write(result, str(tmp_path / "seed_{seed}" / "rl"), str(tmp_path / "out2"))
  with pytest.raises(ValueError, match="needs '{seed}'"):
    seed_plots.write(result, str(tmp_path / "rl"), str(tmp_path / "out2"))
  assert not (tmp_path / "out2").exists()


def test_plot_seeds_script_redraws_the_recorded_run(tmp_path):
  recorded = os.path.join("experiments", "results", "demo_short_first")
  proc = subprocess.run(
      [sys.executable, "experiments/plot_seeds.py",
       f"--seeds_json={recorded}/seeds.json", f"--metrics_dir={recorded}/seed_{{seed}}_rl",
       f"--out_dir={tmp_path}"],
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  for name in ("seeds_arms.png", "seeds_curves.png"):
    assert (tmp_path / name).read_bytes()[:8] == _PNG, name
    assert f"wrote {tmp_path / name}" in proc.stdout

  proc = subprocess.run([sys.executable, "experiments/plot_seeds.py",
                         f"--seeds_json={tmp_path}/absent.json"],
                        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2 and "--seeds_json=" in proc.stderr and "no such file" in proc.stderr
