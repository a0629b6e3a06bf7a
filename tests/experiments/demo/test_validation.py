"""Settings chosen on a validation seed (experiments/demo/validation.py, experiments/validate.py)."""

import json
import math
import os
import subprocess
import sys

import ml_collections
import pytest

from configs import base
from experiments.demo import validation
from rl_post.errors import ConfigError
from tiny_pretrained import save

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _small_config():
  return ml_collections.ConfigDict(dict(
      seed=0, rl=dict(grpo=dict(kl_coef=0.0), num_steps=4, shared_prefix=True, algorithm="grpo"),
      optimizer=dict(learning_rate=1e-5), tasks=dict(heldout_size=8, domains=("a",))))


@pytest.mark.parametrize("specs, match", [
    ([], "at least one"),
    (["rl.grpo.kl_coef"], "must read key=v1"),
    (["rl.grpo.kl_coef="], "must read key=v1"),
    (["rl.grpo.beta=0.1"], "names no field"),
    (["seed=1,2"], "the seed is --seed"),
    (["rl.grpo.kl_coef=0.1", "rl.grpo.kl_coef=0.2"], "given twice"),
    (["rl.grpo.kl_coef=0.1,abc"], "is not a float"),
    (["rl.grpo.kl_coef=0.1,nan"], "is not a float"),
    (["rl.num_steps=2.5"], "is not a int"),
    (["rl.shared_prefix=yes"], "is not a bool"),
    (["rl.grpo.kl_coef=0.1,0.10"], "a value repeats"),
    (["tasks.domains=a,b"], "only bool, int, float and str"),
    (["rl.grpo=1"], "only bool, int, float and str"),
])
def test_bad_grids_are_config_errors_naming_the_flag(specs, match):
  with pytest.raises(ConfigError, match=match) as e:
    validation.parse_grid(_small_config(), specs)
  assert "--grid" in str(e.value)


def test_grid_values_take_the_fields_types():
  grid = validation.parse_grid(_small_config(), [
      "rl.grpo.kl_coef=0,0.04", "rl.num_steps=2,8", "rl.shared_prefix=False",
      "rl.algorithm=rloo"])
  assert grid == {"rl.grpo.kl_coef": [0.0, 0.04], "rl.num_steps": [2, 8],
                  "rl.shared_prefix": [False], "rl.algorithm": ["rloo"]}
  assert isinstance(grid["rl.grpo.kl_coef"][0], float) and isinstance(grid["rl.num_steps"][0], int)


def test_points_one_at_a_time_and_every_combination():
  config = _small_config()
  grid = validation.parse_grid(config, ["rl.grpo.kl_coef=0,0.04", "optimizer.learning_rate=1e-5,3e-5"])
  # one at a time: the config as given once (its own values are not run twice)
  assert validation.grid_points(config, grid) == [
      ("as configured", {}), ("rl.grpo.kl_coef=0.04", {"rl.grpo.kl_coef": 0.04}),
      ("optimizer.learning_rate=3e-05", {"optimizer.learning_rate": 3e-5})]
  product = validation.grid_points(config, grid, product=True)
  assert [o for _, o in product] == [
      {}, {"optimizer.learning_rate": 3e-5}, {"rl.grpo.kl_coef": 0.04},
      {"rl.grpo.kl_coef": 0.04, "optimizer.learning_rate": 3e-5}]


def test_point_config_sets_seed_and_overrides_on_a_copy():
  config = _small_config()
  out = validation.point_config(config, 100, {"rl.grpo.kl_coef": 0.04})
  assert (out.seed, out.rl.grpo.kl_coef) == (100, 0.04)
  assert (config.seed, config.rl.grpo.kl_coef) == (0, 0.0)


def test_wilson_interval_by_hand():
  lo, hi = validation.wilson(0.0, 10)
  assert lo == 0.0 and math.isclose(hi, 0.2775, abs_tol=1e-4)
  lo, hi = validation.wilson(0.5, 96)
  assert math.isclose(lo, 1 - hi) and math.isclose(hi - lo, 2 * 0.09808, abs_tol=1e-4)


def test_result_reads_the_last_evaluation_and_choice_breaks_ties():
  rows = [{"step": 1, "loss": 0.3},
          {"step": 2, "eval/pass_rate": 0.25, "eval_sampled/pass_rate": 0.1},
          {"step": 4, "eval/pass_rate": 0.5, "eval_sampled/pass_rate": 0.2,
           "eval/x/pass_rate": 0.75, "eval/x/difficulty_1/pass_rate": 0.75,
           "eval/x/strict_pass_rate": 0.5}]
  r = validation.point_result(rows, 8)
  assert (r["step"], r["greedy"], r["sampled"]) == (4, 0.5, 0.2)
  assert r["domains"] == {"x": 0.75} and r["curve"] == [(2, 0.25, 0.1), (4, 0.5, 0.2)]
  with pytest.raises(ValueError, match="no held-out evaluation"):
    validation.point_result(rows[:1], 8)
  a, b, c = (dict(name=n, greedy=g, sampled=s) for n, g, s in
             [("a", 0.5, 0.2), ("b", 0.5, 0.3), ("c", 0.5, 0.3)])
  assert validation.choose([a, b, c])["name"] == "b"  # sampled, then the earlier point
  assert validation.choose([a, dict(a, name="d", greedy=0.6)])["name"] == "d"


def _pretrained_config(hf_dir):
  c = base.get_base()
  c.pretrained = dict(path=hf_dir, dtype="float32")
  c.tokenizer = dict(path=hf_dir, system_prompt="End with the number.")
  c.model = dict(attention_impl="auto")
  c.tasks.update(domains=("arithmetic",), difficulties=(1,), heldout_size=6,
                 domain_options=dict(arithmetic=dict(max_difficulty=1,
                                                     answer_format="final_number")))
  c.rl.update(num_steps=2, batch_size=2, num_generations=2, max_new_tokens=6, max_prompt_len=64,
              checkpoint_every=2, eval_every=1)
  c.optimizer = dict(learning_rate=1e-3, schedule="constant", warmup_steps=0, total_steps=2,
                     weight_decay=0.0, grad_clip_norm=1.0)
  c.eval = dict(batch_size=6)
  return c


def test_a_grid_of_rl_runs_from_a_pretrained_model_writes_its_table(tmp_path):
  config = _pretrained_config(save(str(tmp_path / "hf")))
  points = validation.grid_points(config, validation.parse_grid(config, ["rl.grpo.kl_coef=0.5"]))
  out = validation.run(config, str(tmp_path / "val"), seed=100, points=points, command="cmd")
  assert [r["name"] for r in out["rows"]] == ["as configured", "rl.grpo.kl_coef=0.5"]
  for row in out["rows"]:
    assert [s for s, _, _ in row["curve"]] == [1, 2] and 0 <= row["greedy"] <= 1
    assert json.load(open(os.path.join(row["workdir"], "config.json")))["seed"] == 100
  # the KL point ran with a reference model: its update logged the KL term
  kl_rows = [json.loads(line) for line in open(os.path.join(out["rows"][1]["workdir"],
                                                             "metrics.jsonl"))]
  assert any(k.startswith("kl") or "/kl" in k for k in kl_rows[0]), sorted(kl_rows[0])
  assert out["chosen"]["name"] in {"as configured", "rl.grpo.kl_coef=0.5"}
  table = open(tmp_path / "val" / "validation.md").read()
  assert "| rl.grpo.kl_coef=0.5 |" in table and "Chosen: **" in table
  assert json.load(open(tmp_path / "val" / "validation.json"))["heldout_size"] == 6
  # a rerun resumes each point from its finished run: nothing trains again
  metrics = os.path.join(out["rows"][0]["workdir"], "metrics.jsonl")
  written = os.stat(metrics).st_mtime_ns
  again = validation.run(config, str(tmp_path / "val"), seed=100, points=points)
  assert os.stat(metrics).st_mtime_ns == written
  assert [r["greedy"] for r in again["rows"]] == [r["greedy"] for r in out["rows"]]


def test_runs_need_held_out_problems_and_a_sane_seed(tmp_path):
  config = _small_config()
  config.tasks.heldout_size = 0
  with pytest.raises(ConfigError, match="tasks.heldout_size"):
    validation.run(config, str(tmp_path), seed=1, points=[("as configured", {})])
  with pytest.raises(ConfigError, match="--seed"):
    validation.run(_small_config(), str(tmp_path), seed=-1, points=[("as configured", {})])


def test_cli_reports_a_bad_grid_in_one_line(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "experiments/validate.py",
                         "--config=configs/grpo_arithmetic.py:tiny", "--grid=rl.grpo.beta=1",
                         f"--workdir={tmp_path}"], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  assert "error: --grid='rl.grpo.beta': names no field of the config" in proc.stderr
