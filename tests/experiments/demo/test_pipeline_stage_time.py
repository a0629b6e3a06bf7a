"""A pipeline stage's wall-clock adds up over the runs that resume it."""

import json
import time

from experiments.demo import pipeline_stages


def test_a_resumed_stage_reports_its_time_over_every_run(tmp_path):
  stage = tmp_path / "rl"

  def work(seconds):
    time.sleep(seconds)
    return "done"

  out, first_s = pipeline_stages.timed(str(stage), work, 0.2)
  assert out == "done" and first_s >= 0.2
  # the rerun finds the stage finished and returns at once: its own seconds are ~0
  out, total_s = pipeline_stages.timed(str(stage), work, 0.0)
  assert out == "done" and first_s <= total_s < first_s + 0.2
  record = json.loads((stage / pipeline_stages.STAGE_TIME_FILE).read_text())
  assert record == {"seconds": total_s, "runs": 2}


def test_a_run_that_raises_counts_its_time(tmp_path):
  stage = tmp_path / "control"

  def fail():
    time.sleep(0.1)
    raise RuntimeError("stopped")

  try:
    pipeline_stages.timed(str(stage), fail)
  except RuntimeError:
    pass
  _, total_s = pipeline_stages.timed(str(stage), lambda: None)
  assert total_s >= 0.1
  assert json.loads((stage / pipeline_stages.STAGE_TIME_FILE).read_text())["runs"] == 2
