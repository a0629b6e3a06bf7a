"""Progress line, ETA and model FLOPs / MFU."""

import pytest

from rl_post import models
from rl_post.metrics import progress

MODEL = models.ModelConfig(vocab_size=100, num_layers=2, embed_dim=8, num_heads=2,
                           num_kv_heads=1, head_dim=4, mlp_dim=16)


def test_matmul_params_and_flops_by_hand():
  # per layer: q 8x8, k and v 8x4 each, o 8x8, mlp 3 x 8x16; output 8x100
  per_layer = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 16
  assert progress.matmul_params(MODEL) == 2 * per_layer + 800
  assert progress.forward_flops_per_token(MODEL, 10) == 2 * (2 * per_layer + 800) + 4 * 2 * 10 * 8
  f = progress.rl_step_flops(MODEL, num_sequences=4, seq_len=10, generated_tokens=30,
                             num_epochs=2, with_reference=True)
  tok = progress.forward_flops_per_token(MODEL, 10)
  assert f == {"rollout": 30 * tok, "reference": 40 * tok, "update": 3 * 40 * tok * 2,
               "total": (30 + 40 + 240) * tok}
  assert progress.rl_step_flops(MODEL, num_sequences=4, seq_len=10, generated_tokens=30,
                                num_epochs=1, with_reference=False)["reference"] == 0.0


def test_mfu_only_with_a_peak():
  flops = {"total": 2e12}
  assert progress.mfu_metrics(flops, 2.0, 0.0) == {"perf/model_tflop": 2.0}
  assert progress.mfu_metrics(flops, 2.0, 4e12) == {"perf/model_tflop": 2.0, "perf/mfu": 0.25}


def test_eta_excludes_the_compiling_first_step():
  now = [100.0]
  p = progress.Progress(total_steps=10, start_step=4, clock=lambda: now[0])
  now[0] += 30.0  # step 5: compile + run
  m = p.update(5)
  assert m == {"time/mean_step_s": 30.0, "time/eta_s": 150.0}
  now[0] += 2.0
  p.update(6)
  now[0] += 4.0
  m = p.update(7)
  assert m["time/mean_step_s"] == 3.0 and m["time/eta_s"] == 9.0
  line = p.line(7, dict(m, **{"reward/mean": 0.5, "perf/mfu": 0.312}))
  assert line == "step 7/10 (70%) 3.00 s/step ETA 9s | reward 0.500 | mfu 31.2%"


def test_durations_and_bad_bounds():
  assert progress.format_duration(59.6) == "1m00s"
  assert progress.format_duration(3725) == "1h02m05s"
  with pytest.raises(ValueError, match="progress bounds"):
    progress.Progress(total_steps=3, start_step=5)


def test_the_line_reports_compile_seconds_and_programs_apart():
  p = progress.Progress(10, clock=lambda: 0.0)
  m = dict(p.update(1, now=20.0), **{"time/train_s": 12.0})
  assert p.line(1, dict(m, **{"time/compile_s": 13.04, "compile/programs": 3.0})).endswith(
      "| update 12.0s | compile 13.0s (3 programs)")
  assert p.line(1, dict(m, **{"time/compile_s": 0.5, "compile/programs": 1.0})).endswith(
      "| compile 0.5s (1 program)")
  # a step that built nothing (or next to nothing) shows no compile part
  assert "compile" not in p.line(1, dict(m, **{"time/compile_s": 0.0, "compile/programs": 0.0}))
