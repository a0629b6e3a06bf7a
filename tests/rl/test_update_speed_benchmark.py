"""Smoke test of experiments/benchmarks/update_speed.py: this tree against itself at HEAD."""

import json
import os

import pytest

from experiments.benchmarks import update_speed


def test_flop_count_is_three_forwards_of_the_model_shapes():
  model = dict(vocab_size=10, num_layers=2, embed_dim=4, num_heads=2, num_kv_heads=1,
               head_dim=2, mlp_dim=8)
  # per token: layers 2 x (2(2*4*4 + 2*4*2 + 3*4*8) + 4*3*2*2) + 2*4*10 = 2 x 336 + 80
  assert update_speed.update_gflop(model, n=5, t=3) * 1e9 == 3 * 5 * 3 * (2 * 336 + 80)


def test_smoke_run_times_both_trees_in_pinned_children(tmp_path, capsys):
  out = tmp_path / "update_speed.json"
  update_speed.main(["--smoke", "--before-ref=HEAD", "--repeats=2", f"--out={out}",
                     '--settings={"unroll_layers": 2, "logprob_remat": false}'])
  rows = json.load(open(out))["rows"]
  assert [r["tree"] for r in rows] == ["before (HEAD)", "this tree + settings"]
  assert [r["rl_settings"] for r in rows] == [{}, {"unroll_layers": 2, "logprob_remat": False}]
  for r in rows:
    assert r["cpu_s"] > 0 and r["matmul_peak_gflops"] > 0 and r["gflop"] > 0
    assert 0 < r["frac_of_matmul_peak"] and r["core"] in os.sched_getaffinity(0)
    assert all(abs(v) < 1e6 for v in r["first_step"].values())  # finite loss, grad norm
  assert "CPU s/update" in capsys.readouterr().out


def test_settings_the_rl_config_refuses_stop_before_any_child_runs(capsys):
  for bad in ('{"no_such_setting": 1}', '{"logprob_chunk": 0}', '[1]', '{not json'):
    with pytest.raises(SystemExit) as exit_info:
      update_speed.main(["--smoke", "--before-ref=HEAD", f"--settings={bad}"])
    assert exit_info.value.code == 2
    assert "--settings" in capsys.readouterr().err


def test_a_ref_that_is_not_a_commit_stops_before_any_child_runs(capsys):
  with pytest.raises(SystemExit) as exit_info:
    update_speed.main(["--smoke", "--before-ref=no-such-ref"])
  assert exit_info.value.code == 2
  assert "--before-ref: 'no-such-ref' is not a commit" in capsys.readouterr().err
  assert update_speed.check_ref("HEAD") == "HEAD"
