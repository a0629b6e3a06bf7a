"""The RL loop builds its programs in its first step and none after (counted, not timed),
and its timers account for the step: the update's device time is the update's, not the
next rollout's, and compile time is reported apart (issue 41)."""

import os

import jax
import numpy as np

from rl_post.metrics import compiles, host_rss
from rl_post.metrics.timing import StepTimer
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer
from tiny_grpo import tiny_digit_config


def test_compile_clock_counts_programs_not_calls():
  clock = compiles.CompileClock()
  f = jax.jit(lambda x: x * 3 + 1)
  f(np.ones(3))
  f(np.ones(3))
  assert clock.take()[0] == 1
  f(np.ones(3))
  assert clock.take() == (0, 0.0)
  f(np.ones(5))  # a new shape is a new program
  programs, seconds = clock.take()
  assert programs == 1 and seconds > 0


def test_step_timer_reports_compile_time_of_outermost_blocks_apart():
  clock = compiles.CompileClock()
  timer = StepTimer(compile_clock=clock)
  g = jax.jit(lambda x: x - 2)
  with timer("rollout"):
    with timer("inner"):
      g(np.ones(7))
  with timer("train"):
    g(np.ones(7))  # already built
  m = timer.metrics()
  assert m["compile/programs"] == 1
  assert m["time/compile_s"] == m["time/rollout_compile_s"] == m["time/inner_compile_s"] > 0
  assert "time/train_compile_s" not in m
  timer.reset()
  assert timer.metrics()["compile/programs"] == 0


def test_steps_after_the_first_build_no_program(tokenizer_path, tmp_path):
  # width_multiple=0: every update has the rollout's full width (a new width would be a
  # new program by design: rl.width_multiple)
  config = tiny_digit_config(tokenizer_path, num_steps=3, width_multiple=0)
  trainer.train(config, str(tmp_path))
  rows = [m for m in read_metrics(str(tmp_path)) if "loss" in m]
  assert [m["step"] for m in rows] == [1, 2, 3]
  assert rows[0]["compile/programs"] > 0 and rows[0]["time/compile_s"] > 0
  assert [m["compile/programs"] for m in rows[1:]] == [0, 0]
  assert all(m["time/compile_s"] == 0 for m in rows[1:])
  # the setup is reported once, on the first step
  assert "time/setup_s" in rows[0] and not any("time/setup_s" in m for m in rows[1:])
  if not os.path.exists(host_rss.STATUS):  # Linux only
    return
  # host memory after the setup (once) and after each step's rollout and update
  assert "host/setup_peak_rss_gib" in rows[0]
  assert not any("host/setup_peak_rss_gib" in m for m in rows[1:])
  peaks = [(m["host/rollout_peak_rss_gib"], m["host/update_peak_rss_gib"]) for m in rows]
  assert rows[0]["host/setup_peak_rss_gib"] <= peaks[0][0]
  flat = [p for pair in peaks for p in pair]
  assert all(0 < a <= b for a, b in zip(flat, flat[1:]))  # the peak so far only grows
  for m in rows:
    # the phases lie inside the step (the update's wait included in time/train_s)
    phases = m["time/rollout_s"] + m["time/reward_s"] + m["time/train_s"]
    assert phases <= m["time/step_s"] + 1e-6
    assert m["throughput/rollout_tokens_per_s"] > 0
