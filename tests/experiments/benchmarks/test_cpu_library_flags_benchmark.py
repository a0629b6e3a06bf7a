"""Smoke test of experiments/benchmarks/cpu_library_flags.py: settings in their own
processes, compared with the default; a setting XLA rejects is reported, not fatal."""

import json

from experiments.benchmarks import cpu_library_flags


def test_smoke_times_each_setting_against_the_default(tmp_path, capsys):
  out = tmp_path / "flags.json"
  cpu_library_flags.main(["--smoke", "--rounds=1", "--calls=3", f"--out={out}"])
  rows = json.load(open(out))["rows"]
  assert [r["setting"] for r in rows] == list(cpu_library_flags.SMOKE_SETTINGS)
  default, other = (r["shapes"]["smoke"] for r in rows)
  assert default["vs_default"] == 1.0 and default["same_bits_as_default"]
  assert other["us"] > 0 and other["vs_default"] == other["us"] / default["us"]
  assert other["max_rel_error"] < 1e-5 and other["mkn"] == [16, 32, 64]
  assert "bits = default" in capsys.readouterr().out


def test_a_setting_xla_rejects_is_reported_as_failed(monkeypatch):
  monkeypatch.setitem(cpu_library_flags.SETTINGS, "bogus",
                      "--xla_cpu_experimental_xnn_fusion_type=no_such_type")
  default, bogus = cpu_library_flags.measure(("default (Eigen)", "bogus"), smoke=True,
                                             rounds=1, calls=2)
  assert not default["failed"] and "shapes" in default
  assert "no_such_type" in bogus["failed"].lower() and "shapes" not in bogus
