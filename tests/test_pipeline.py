"""The demo pipeline end to end at toy size: every stage and its outputs."""

import json
import os

from configs import demo
from rl_post import pipeline


def test_tiny_pipeline_writes_report_and_resumable_stages(tmp_path):
  result = pipeline.run(demo.get_config("tiny"), str(tmp_path))
  report = tmp_path / "report"
  for name in ("summary.md", "summary.json", "reward.png"):
    assert (report / name).stat().st_size > 0, name
  summary = json.load(open(report / "summary.json"))
  assert set(summary["evals"]) == {"before", "after", "before_sampled", "after_sampled"}
  assert summary["before_vs_after"]["n"] == 16
  for stage in ("sft", "rl"):
    for name in ("config.json", "metrics.jsonl", "checkpoints"):
      assert os.path.exists(tmp_path / stage / name), (stage, name)
  assert os.path.exists(tmp_path / "tokenizer" / "arithmetic.model")
  before = result["evals"]["before"]
  assert before["correct"].shape == (16,) and len(before["domain"]) == 16
