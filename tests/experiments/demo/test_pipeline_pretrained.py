"""The demo pipeline from a pretrained chat model (a tiny one saved here): base eval,
RL, the rejection-sampling control, report."""

import json
import os

import pytest

from configs import base
from experiments.demo import pipeline, pipeline_pretrained
from rl_post.errors import ConfigError
from tiny_pretrained import save


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  return save(str(tmp_path_factory.mktemp("tiny_pretrained")))


def _config(hf_dir):
  c = base.get_base()
  c.pretrained = dict(path=hf_dir, dtype="float32")
  c.tokenizer = dict(path=hf_dir, system_prompt="End with the number.")
  c.model = dict(attention_impl="auto")  # the architecture comes from the checkpoint
  c.tasks.update(domains=("arithmetic",), difficulties=(1,), heldout_size=6,
                 domain_options=dict(arithmetic=dict(max_difficulty=1,
                                                     answer_format="final_number")))
  c.rl.update(num_steps=2, batch_size=2, num_generations=2, max_new_tokens=6, max_prompt_len=64,
              checkpoint_every=2)
  c.optimizer = dict(learning_rate=1e-3, schedule="constant", warmup_steps=0, total_steps=2,
                     weight_decay=0.0, grad_clip_norm=1.0)
  c.control = dict(sft=dict(num_steps=2, batch_size=2, max_len=96, checkpoint_every=2),
                   optimizer=dict(learning_rate=1e-3, schedule="constant", warmup_steps=0,
                                  total_steps=2, weight_decay=0.0, grad_clip_norm=1.0))
  c.eval = dict(batch_size=6)
  return c


def test_pretrained_pipeline_runs_every_stage_and_writes_the_report(hf_dir, tmp_path):
  result = pipeline.run(_config(hf_dir), str(tmp_path))  # dispatched on pretrained.path
  report = tmp_path / "report"
  for name in ("summary.md", "summary.json", "reward.png", "pass_rate.png"):
    assert (report / name).stat().st_size > 0, name
  summary = json.load(open(report / "summary.json"))
  assert set(summary["demo"]["macro"]) == {"before", "after", "control"}
  markdown = open(report / "summary.md").read()
  assert "pretrained start vs RL vs RFT control" in markdown
  stats = json.load(open(tmp_path / "control" / "samples.jsonl.stats.json"))
  assert stats["samples"] == 2 * 2 * 2  # the RL run's budget: steps x B x G
  evals = result["evals"]
  assert evals["before"]["correct"].shape == (6,) and "strict_correct" in evals["before"]
  if stats["kept"] == 0:  # a random model solved nothing: the control is the start itself
    assert (evals["control"]["correct"] == evals["before"]["correct"]).all()
  else:
    assert os.path.exists(tmp_path / "control" / "sft" / "export")
  assert os.path.exists(tmp_path / "rl" / "export")
  # The pipeline evaluates the export after RL; the trainer does not evaluate it twice.
  rl_rows = [json.loads(line) for line in open(tmp_path / "rl" / "metrics.jsonl")]
  assert [r["step"] for r in rl_rows] == [1, 2]
  assert not any("eval/pass_rate" in r for r in rl_rows)


def test_the_control_fine_tunes_on_verified_samples(hf_dir, tmp_path):
  config = _config(hf_dir)
  control = tmp_path / "control"
  control.mkdir()
  prompt = "What is 3+4? End your response with the answer as a number."
  (control / "samples.jsonl").write_text(
      json.dumps({"prompt": prompt, "response": "3 + 4 = 7"}) + "\n")
  export = pipeline_pretrained._rft_control(config, hf_dir, str(control))
  assert export == str(control / "sft" / "export") and os.path.isdir(export)
  with open(control / "sft" / "metrics.jsonl") as f:
    assert [json.loads(line)["step"] for line in f] == [1, 2]


def test_missing_control_settings_fail_before_any_stage(hf_dir, tmp_path):
  config = _config(hf_dir)
  del config.control["sft"]
  with pytest.raises(ConfigError, match="control.sft"):
    pipeline.run(config, str(tmp_path))
  assert not os.listdir(tmp_path)


def test_seeds_run_the_pretrained_pipeline_and_aggregate(hf_dir, tmp_path):
  from experiments.demo import seed_runs
  out = seed_runs.run(_config(hf_dir), str(tmp_path), [0, 1])
  assert [row["seed"] for row in out["rows"]] == [0, 1]
  assert {"before", "after", "control"} <= set(out["rows"][0])
  assert os.path.exists(out["paths"]["md"]) and "macro_after" in out["aggregate"]


@pytest.mark.parametrize("variant", ["", "quick", "arith_code", "tiny", "rloo",
                                     "dr_grpo"])
def test_every_smollm2_recipe_variant_passes_the_stage_checks(variant):
  """The recipe's variants (the quickstart's `:quick` among them) parse for every stage; the
  quickstart's RFT samples (prompt + response) all fit the control's SFT length."""
  from configs import smollm2_135m_grpo
  c = smollm2_135m_grpo.get_config(variant)
  pipeline_pretrained.check_stages(c)
  assert set(c.tasks.domains) <= set(smollm2_135m_grpo.MIXTURE)
  if variant == "quick":
    assert len(c.tasks.domains) >= 4 and "rg/leg_counting" not in c.tasks.domains
    assert c.rl.max_prompt_len + c.rl.max_new_tokens <= c.control.sft.max_len
  if variant == "arith_code":
    assert "code" in c.tasks.domains and "rg/products" not in c.tasks.domains
