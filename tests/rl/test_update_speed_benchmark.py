"""Smoke test of experiments/benchmarks/update_speed.py: this tree against itself at HEAD."""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments", "benchmarks"))

import update_speed  # noqa: E402


def test_flop_count_is_three_forwards_of_the_model_shapes():
  model = dict(vocab_size=10, num_layers=2, embed_dim=4, num_heads=2, num_kv_heads=1,
               head_dim=2, mlp_dim=8)
  # per token: layers 2 x (2(2*4*4 + 2*4*2 + 3*4*8) + 4*3*2*2) + 2*4*10 = 2 x 336 + 80
  assert update_speed.update_gflop(model, n=5, t=3) * 1e9 == 3 * 5 * 3 * (2 * 336 + 80)


def test_smoke_run_times_both_trees_in_pinned_children(tmp_path, capsys):
  out = tmp_path / "update_speed.json"
  update_speed.main(["--smoke", "--before-ref=HEAD", "--repeats=2", f"--out={out}"])
  rows = json.load(open(out))["rows"]
  assert [r["tree"] for r in rows] == ["before (HEAD)", "this tree"]
  for r in rows:
    assert r["cpu_s"] > 0 and r["matmul_peak_gflops"] > 0 and r["gflop"] > 0
    assert 0 < r["frac_of_matmul_peak"] and r["core"] in os.sched_getaffinity(0)
    assert all(abs(v) < 1e6 for v in r["first_step"].values())  # finite loss, grad norm
  assert "CPU s/update" in capsys.readouterr().out
