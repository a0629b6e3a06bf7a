"""Tests for rl_post.metrics: JSONL/TensorBoard writer, timers, percentiles."""

import glob
import json
import os
import struct

import jax.numpy as jnp
import numpy as np
import pytest

from rl_post.metrics import timing, writers


def test_write_and_read_back_with_conversions(tmp_path):
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    w.write(0, {"reward/mean": 0.5, "kl": np.float32(0.25),
                "time/step_s": jnp.asarray(2.0), "count": np.int64(3),
                "flag": np.bool_(True)})
    w.write(1, {"reward/mean": np.array(0.75)})
  got = writers.read_metrics(tmp_path)
  assert got == [
      {"step": 0, "reward/mean": 0.5, "kl": 0.25, "time/step_s": 2.0,
       "count": 3.0, "flag": 1.0},
      {"step": 1, "reward/mean": 0.75},
  ]
  # One JSON object per line, namespaces kept verbatim.
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert json.loads(lines[0])["reward/mean"] == 0.5


def test_nonfinite_written_as_null_and_counted(tmp_path):
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    w.write(0, {"loss": float("nan"), "kl": 1.0})
    w.write(1, {"loss": np.inf, "kl": -np.inf})
    assert w.nonfinite_counts == {"loss": 2, "kl": 1}
  text = (tmp_path / "metrics.jsonl").read_text()
  assert "NaN" not in text and "Infinity" not in text
  assert writers.read_metrics(tmp_path) == [
      {"step": 0, "loss": None, "kl": 1.0},
      {"step": 1, "loss": None, "kl": None}]


@pytest.mark.parametrize("metrics, match", [
    ({"reward/per_domain": np.ones(3)}, r"'reward/per_domain' must be a scalar, got an array of shape \(3,\)"),
    ({"x": jnp.ones((1,))}, r"'x' must be a scalar"),
    ({"name": "abc"}, r"'name' must be a number"),
    ({"step": 1.0}, "reserved"),
    ({"": 1.0}, "non-empty strings"),
])
def test_write_rejects_bad_metrics(tmp_path, metrics, match):
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    with pytest.raises(ValueError, match=match):
      w.write(0, metrics)


def test_write_rejects_bad_step_and_closed_writer(tmp_path):
  w = writers.MetricWriter(tmp_path, tensorboard=False)
  with pytest.raises(ValueError, match="step must be an int"):
    w.write(1.5, {"a": 1.0})
  with pytest.raises(ValueError, match="step must be >= 0"):
    w.write(-1, {"a": 1.0})
  w.close()
  w.close()  # Idempotent.
  with pytest.raises(ValueError, match="closed"):
    w.write(0, {"a": 1.0})


def test_read_metrics_skips_truncated_last_line(tmp_path):
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    w.write(0, {"a": 1.0})
    w.write(1, {"a": 2.0})
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 2, "a": 3.')  # Crash mid-write.
  with pytest.warns(UserWarning, match="truncated last line"):
    got = writers.read_metrics(tmp_path)
  assert [r["step"] for r in got] == [0, 1]


def test_read_metrics_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="no metrics file"):
    writers.read_metrics(tmp_path)
  (tmp_path / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 2}\n')
  with pytest.raises(ValueError, match="line 2 is not a metrics record"):
    writers.read_metrics(tmp_path)


def test_resume_truncates_later_steps_and_repairs_partial_line(tmp_path):
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    for step in range(6):
      w.write(step, {"a": float(step)})
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 6, "a"')
  # Resumed from the checkpoint at step 3: steps 4.. are replayed.
  with pytest.warns(UserWarning, match="truncated last line"):
    w = writers.MetricWriter(tmp_path, tensorboard=False, truncate_after_step=3)
  with w:
    w.write(4, {"a": 40.0})
  got = writers.read_metrics(tmp_path)
  assert [r["step"] for r in got] == [0, 1, 2, 3, 4]
  assert got[-1]["a"] == 40.0


def test_reopen_without_truncation_appends(tmp_path):
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    w.write(0, {"a": 1.0})
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    w.write(1, {"a": 2.0})
  assert [r["step"] for r in writers.read_metrics(tmp_path)] == [0, 1]


def _read_tb_events(path):
  """Parses a TFRecord event file: [len u64][crc u32][data][crc u32]."""
  from tensorboardX.proto import event_pb2
  with open(path, "rb") as f:
    data = f.read()
  events, pos = [], 0
  while pos < len(data):
    (length,) = struct.unpack("<Q", data[pos:pos + 8])
    events.append(event_pb2.Event.FromString(data[pos + 12:pos + 12 + length]))
    pos += 12 + length + 4
  return events


def _read_tb_scalars(path):
  return {(v.tag, e.step): v.simple_value
          for e in _read_tb_events(path) for v in e.summary.value}


def test_tensorboard_event_file_has_scalars(tmp_path):
  with writers.MetricWriter(tmp_path) as w:
    w.write(3, {"reward/mean": 0.5, "kl": float("nan")})
  files = glob.glob(os.path.join(tmp_path, "tb", "events.out.tfevents.*"))
  assert len(files) == 1
  assert _read_tb_scalars(files[0]) == {("reward/mean", 3): 0.5}  # NaN skipped in TB.


def test_step_timer_accumulates_and_resets():
  ticks = iter([0.0, 1.0, 1.5, 4.0, 10.0, 10.25, 11.0, 12.0])
  timer = timing.StepTimer(clock=lambda: next(ticks))
  with timer("rollout"):  # 0.0 -> 1.0
    pass
  with timer("step"):  # 1.5 -> 12.0, with "train" inside twice.
    with timer("train"):  # 4.0 -> 10.0
      pass
    with timer("train"):  # 10.25 -> 11.0
      pass
  assert timer.metrics() == {"time/rollout_s": 1.0, "time/step_s": 10.5,
                             "time/train_s": 6.75}
  timer.reset()
  assert timer.metrics() == {}


def test_step_timer_records_time_when_block_raises_and_rejects_misuse():
  ticks = iter([0.0, 2.0])
  timer = timing.StepTimer(clock=lambda: next(ticks))
  with pytest.raises(RuntimeError):
    with timer("rollout"):
      raise RuntimeError("boom")
  assert timer.metrics() == {"time/rollout_s": 2.0}
  timer = timing.StepTimer()
  with pytest.raises(ValueError, match="already running"):
    with timer("a"):
      with timer("a"):
        pass
  with pytest.raises(ValueError, match="timer name must be"):
    with timer("time/a"):
      pass


def test_percentiles_values_and_keys():
  values = [0.1, 0.2, 0.3, 0.4, 1.0]
  # numpy linear interpolation: p50 = 0.3, p99 = 0.4 + 0.96 * 0.6 = 0.976.
  got = timing.percentiles(values, prefix="sandbox/latency_")
  assert got.keys() == {"sandbox/latency_p50_s", "sandbox/latency_p99_s"}
  assert got["sandbox/latency_p50_s"] == pytest.approx(0.3)
  assert got["sandbox/latency_p99_s"] == pytest.approx(0.976)
  assert timing.percentiles(np.array([2.0]), qs=(99.9, 0)) == {
      "p99.9_s": 2.0, "p0_s": 2.0}


@pytest.mark.parametrize("values, qs, match", [
    ([], (50,), "values is empty"),
    ([[1.0, 2.0]], (50,), r"values must be 1-D, got shape \(1, 2\)"),
    ([1.0, float("nan")], (50,), "NaN or inf"),
    ([1.0], (101,), r"each q must be a number in \[0, 100\], got 101"),
    ([1.0], (), "qs is empty"),
])
def test_percentiles_bad_inputs(values, qs, match):
  with pytest.raises(ValueError, match=match):
    timing.percentiles(values, qs)


def test_resume_purges_replayed_steps_in_tensorboard(tmp_path):
  with writers.MetricWriter(tmp_path, truncate_after_step=7) as w:
    w.write(8, {"a": 1.0})
  (path,) = glob.glob(os.path.join(tmp_path, "tb", "events.out.tfevents.*"))
  starts = [e.step for e in _read_tb_events(path)
            if e.HasField("session_log") and e.session_log.status == 1]
  assert starts == [8]  # SessionLog.START at 8: TensorBoard drops old >= 8.


def test_truncate_after_drops_later_rows_mid_run(tmp_path):
  """A rollback to step 2 mid-run: rows 3-4 go, the replay appends after 2."""
  with writers.MetricWriter(tmp_path, tensorboard=False) as w:
    for step in (1, 2, 3, 4):
      w.write(step, {"loss": float(step)})
    w.truncate_after(2)
    w.write(3, {"loss": 30.0})
    with pytest.raises(ValueError, match="step must be >= 0"):
      w.truncate_after(-1)
  rows = writers.read_metrics(tmp_path)
  assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 30.0)]
