"""vs_trl_smollm2.py: the smoke run end to end (our side only where the TRL environment
is missing, both sides where `setup_baselines.sh trl` made it), the tokenizer files the
TRL side reads against ours, and the tables.
"""

import json
import math
import os

import numpy as np

from experiments.benchmarks import baselines
from experiments.benchmarks import vs_trl_smollm2 as bench

TRL_PYTHON = baselines.env_python("trl")


def test_smoke_run(tmp_path, capsys):
  both = os.path.exists(TRL_PYTHON)
  out = tmp_path / "v.json"
  result = bench.main(["--smoke", f"--baselines={'trl' if both else 'none'}",
                       f"--workdir={tmp_path / 'w'}", f"--out={out}"])
  assert json.loads(out.read_text())["rows"][0]["system"] == bench.OURS
  h = result["hparams"]
  assert (h["num_steps"], h["batch_size"], h["num_generations"], h["max_new_tokens"]) == (
      2, 2, 2, 8)
  assert (h["loss_type"], h["beta"], h["learning_rate"]) == ("dapo", 0.0, 2e-5)
  assert len(result["train_task_ids"]) == 4 and len(result["heldout_task_ids"]) == 4
  assert result["domains"] == ["arithmetic", "rg/basic_arithmetic", "rg/chain_sum", "rg/products"]
  # the reference answer earns the full reward, the other fixed texts none
  assert [f["reward"] for f in result["fixed_texts"]] == [1.0, 0.0, 0.0] * 2
  rows = result["rows"]
  assert [r["system"] for r in rows] == [bench.OURS] + ([bench.TRL] if both else [])
  for r in rows:
    assert r["steps"] == 2 and len(r["loss"]) == 2 and all(math.isfinite(x) for x in r["loss"])
    assert r["trained_task_ids_equal"]
    assert r["total_s"] >= r["steps_s"] > 0 and r["startup_s"] > 0
    assert set(r["time_split_s"]) == {"rollout", "reward", "update"}
    for phase in ("heldout_before", "heldout_after"):
      held = r[phase]
      assert set(held["per_domain"]) == set(r["heldout_before"]["per_domain"])
      assert held["domain_mean"] == np.mean(list(held["per_domain"].values()))
  wdir = tmp_path / "w"
  assert (wdir / "hf_init" / "config.json").exists() and (wdir / "hf_init" / "tokenizer.json").exists()
  printed = capsys.readouterr().out
  assert "held-out greedy completion" in printed and "total s" in printed
  if both:  # the TRL side saw our model, prompts, tasks and rewards (main checks; shown here)
    trl = rows[1]
    assert trl["prompt_ids_equal"] and trl["logit_max_diff"] < 2e-3 and trl["torch_threads"] == 2
    assert trl["fixed_text_rewards"] == [f["reward"] for f in result["fixed_texts"]]
    assert 0.0 <= result["before_agreement"] <= 1.0 and result["trl_over_ours"]["total_s"] > 0
  else:
    assert result["trl_over_ours"] is None and result["before_agreement"] is None


def test_exported_tokenizer_encodes_chat_prompts_like_ours(tmp_path):
  """tokenizer.json + tokenizer_config.json from the GGUF tokenizer: our loader and
  transformers' AutoTokenizer (what GRPOTrainer renders conversational prompts with)
  give the ids batching.prompt_ids gives, with the config's system prompt."""
  import transformers  # test extras

  from configs import smollm2_135m_grpo
  from rl_post.data import batching
  from rl_post.data.hf_tokenizer import from_gguf, from_tokenizer_json
  from rl_post.tasks import registry
  c = smollm2_135m_grpo.get_config("quick")
  ours = from_gguf(c.tokenizer.path)
  batching.configure_prompts(ours, c.tokenizer)
  bench.export_tokenizer(ours, str(tmp_path))
  again = from_tokenizer_json(str(tmp_path))
  batching.configure_prompts(again, c.tokenizer)
  theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  assert (theirs.eos_token_id, theirs.pad_token_id) == (ours.eos_id, ours.pad_id)
  rng = np.random.default_rng(0)
  for name in smollm2_135m_grpo.QUICK_MIXTURE:
    domain = registry.make_domain(name, c.tasks.domain_options[name].to_dict())
    task = domain.generate(rng, 1)
    ids = batching.prompt_ids(ours, task.prompt)
    assert batching.prompt_ids(again, task.prompt) == ids
    messages = [{"role": "system", "content": c.tokenizer.system_prompt},
                {"role": "user", "content": task.prompt}]
    assert list(theirs.apply_chat_template(conversation=[messages], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"][0]) == ids
    response = ours.encode(domain.demonstration(task) + " é") + [ours.eos_id]
    assert theirs.decode(response, skip_special_tokens=True) == ours.decode(response)


def test_tables_and_summaries():
  held = bench.heldout_summary(["a", "b", "b", "a", "b"], [True, False, True, True, True])
  assert held["per_domain"] == {"a": 1.0, "b": 2 / 3} and held["pass_rate"] == 0.8
  assert held["domain_mean"] == (1.0 + 2 / 3) / 2 and held["num_tasks"] == 5
  row = lambda system, before, after: dict(
      system=system, heldout_before=dict(bench.heldout_summary(["a", "b"], before),
                                         correct=before),
      heldout_after=bench.heldout_summary(["a", "b"], after),
      time_split_s=dict(rollout=1.0, reward=0.01, update=2.0), startup_s=3.0, steps_s=6.0,
      total_s=9.0)
  rows = [row("ours", [True, False], [True, True]), row("TRL", [True, True], [True, False])]
  assert bench.before_agreement(rows) == 0.5 and bench.before_agreement(rows[:1]) is None
  lines = bench.heldout_table(rows).splitlines()
  assert lines[2].split()[-3:] == ["50.0", "->", "100.0"]
  assert lines[3].split()[-3:] == ["100.0", "->", "50.0"]
  assert bench.time_table(rows).splitlines()[2].split()[1:] == [
      "1.00", "0.010", "2.00", "3.0", "6.0", "9.0"]
  assert bench.expected_task_ids(dict(hparams=dict(num_generations=2),
                                      train_task_ids=["x", "y"])) == ["x", "x", "y", "y"]
