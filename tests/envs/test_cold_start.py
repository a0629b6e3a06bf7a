"""The SFT cold start from the oracles (rl_post/sft/episodes.py): solved episodes rendered
as the RL episodes are, the loss on the assistant turns only, every dropped episode
counted, and the tiny config from the data to SFT steps and an export RL can start from."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import grpo_episodes_sft, smollm2_135m_episodes_sft
from rl_post.data import batching, tokenizer_fingerprint
from rl_post.envs import trainer_rounds
from rl_post.errors import ConfigError
from rl_post.metrics.writers import read_metrics
from rl_post.sandbox import Sandbox, SandboxConfig
from rl_post.sft import dataset
from rl_post.sft import episodes as sft_episodes
from rl_post.sft import trainer as sft_trainer
from rl_post.training.run import run_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _runs(mask):
  """[(start, end, value)] of the maximal runs of equal values in `mask`."""
  out, start = [], 0
  for i in range(1, len(mask) + 1):
    if i == len(mask) or mask[i] != mask[start]:
      out.append((start, i, mask[start]))
      start = i
  return out


def _decode(tok, ids):
  if hasattr(tok, "backend"):  # the HF tokenizer: show the template's special tokens
    return tok.decode(ids, skip_special_tokens=False)
  return tok.decode(ids)


@pytest.mark.parametrize("config_module", [grpo_episodes_sft, smollm2_135m_episodes_sft],
                         ids=["call_vocab", "smollm2_chat_template"])
def test_the_loss_mask_covers_exactly_the_assistant_turns(sandbox, config_module):
  c = config_module.get_config("")
  c.cold_start.tasks_per_level = 1  # one level-1 task of each domain
  section, cold = sft_episodes.sections(c)
  tok = run_tokenizer(c, trainer_rounds.tokenizer_for(section))
  tasks = sft_episodes.draw_tasks(section, cold, 0)
  assert sorted(t.domain for t in tasks) == ["data_questions", "fs_chores", "repo_repair"]
  render = sft_episodes.renderer(section, tok)
  chat = section.chat_template == "on"
  for task, (messages, reward, verify_error) in zip(
      tasks, sft_episodes.run_oracle(section, tasks, sandbox)):
    assert reward == 1.0 and verify_error is None, task.domain
    episode = dataset.Episode(messages)
    ids, mask = render(episode)
    assert len(ids) == len(mask)
    runs = _runs(mask)
    learned = [_decode(tok, ids[a:b]) for a, b, m in runs if m == 1]
    context = [_decode(tok, ids[a:b]) for a, b, m in runs if m == 0]
    assert learned == episode.turns and len(learned) >= 3  # every turn, exactly, nothing else
    assert mask[-1] == 1  # no EOS after the last turn: RL's turns end at </tool_call>
    shown = [text for role, text in messages if role != "assistant"]
    assert len(context) == len(shown)
    if chat:
      # the whole example is the template's rendering of the conversation (the episode's
      # tool message holds the response without its framing newlines)
      as_dicts = [{"role": r, "content": text.strip("\n") if r == "tool" else text}
                  for r, text in messages]
      assert _decode(tok, ids) == tok.apply_chat_template(as_dicts[:-1]) + messages[-1][1]
      assert context[0] == tok.apply_chat_template(as_dicts[:1])
      for text, (_, tool) in zip(context[1:], [m for m in messages if m[0] == "tool"]):
        assert text.startswith("<|im_end|>\n<|im_start|>") and tool.strip("\n") in text
        assert text.endswith("<|im_start|>assistant\n")
    else:
      assert context == shown and _decode(tok, ids) == "".join(t for _, t in messages)


def test_unsolved_episodes_and_ones_that_do_not_fit_are_dropped_and_counted(sandbox, tmp_path):
  c = grpo_episodes_sft.get_config("tiny")
  # data_questions' oracle submits at turn 3, so 2 turns leave it unsolved; fs_chores is
  # graded on its files, done by turn 2
  c.episodes.update(domains=("data_questions", "fs_chores"), max_turns=2)
  c.cold_start.update(domains=(), tasks_per_level=3)
  out = str(tmp_path / "episodes.jsonl")
  stats = sft_episodes.collect(c, out, sandbox=sandbox)
  assert stats["drawn"] == 6 and stats["kept"] == 3
  assert stats["dropped"] == dict.fromkeys(sft_episodes.DROP_REASONS, 0) | {"unsolved": 3}
  assert stats["per_level"] == {"data_questions/1": {"drawn": 3, "unsolved": 3},
                                "fs_chores/1": {"drawn": 3, "kept": 3}}
  records = [json.loads(line) for line in open(out)]
  assert [r["domain"] for r in records] == ["fs_chores"] * 3
  assert all(r["turns"] == 2 and r["messages"][-1]["role"] == "assistant" for r in records)
  # the budgets: a solved episode that RL could not hold is dropped, with its reason
  section, cold = sft_episodes.sections(c)
  tok = run_tokenizer(c, trainer_rounds.tokenizer_for(section))
  encoders = trainer_rounds.encoders(section, tok)
  messages = [(m["role"], m["content"]) for m in records[0]["messages"]]
  reason = lambda s, k: sft_episodes.drop_reason(messages, s, k, tok, encoders)
  assert reason(section, cold) is None
  longest_turn = max(len(tok.encode(t)) for r, t in messages if r == "assistant")
  total = sum(len((tok.encode if r == "assistant" else encoders[1])(t)) for r, t in messages[1:])
  prompt = len(encoders[0](messages[0][1]))
  shrink = dataclasses.replace
  assert reason(shrink(section, turn_tokens=longest_turn - 1), cold) == "turn_too_long"
  assert reason(section, shrink(cold, max_new_tokens=total - 1)) == "episode_too_long"
  assert reason(section, shrink(cold, max_new_tokens=total)) is None
  assert reason(section, shrink(cold, max_prompt_len=prompt - 1)) == "prompt_too_long"
  odd = [messages[0], ("assistant", "caf\u00e9 " + messages[1][1])] + messages[2:]
  assert sft_episodes.drop_reason(odd, section, cold, tok, encoders) == "untokenizable"


def test_a_verification_the_sandbox_rejects_is_dropped_and_counted(tmp_path):
  c = grpo_episodes_sft.get_config("tiny")
  c.episodes.domains = ("repo_repair",)
  c.cold_start.update(domains=(), tasks_per_level=1)
  # every run of the package's files, the final grading included, is over the input cap
  with Sandbox(SandboxConfig(num_workers=1, timeout_s=10.0, max_input_bytes=64)) as small:
    stats = sft_episodes.collect(c, str(tmp_path / "e.jsonl"), sandbox=small)
  assert stats["kept"] == 0 and stats["dropped"]["verify_error"] == 1
  assert open(tmp_path / "e.jsonl").read() == ""


def test_tiny_cold_start_end_to_end(tmp_path):
  """The entry point builds the data; SFT trains on it (loss on the assistant turns) and
  exports params with the RL run's tokenizer."""
  out = str(tmp_path / "episodes.jsonl")
  done = subprocess.run([sys.executable, "experiments/build_episode_sft.py",
                         "--config=configs/grpo_episodes_sft.py:tiny", f"--out={out}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "4 of 4 oracle episodes kept" in done.stdout
  stats = json.load(open(out + ".stats.json"))
  assert stats["kept"] == stats["drawn"] == 4 and stats["per_level"] == {
      "data_questions/1": {"drawn": 4, "kept": 4}}
  examples = dataset.load_examples(out)
  assert all(isinstance(e, dataset.Episode) and len(e.turns) == 3 for e in examples)

  c = grpo_episodes_sft.get_config("tiny")
  c.sft.dataset = out
  section = trainer_rounds.load(c.episodes)
  tok = run_tokenizer(c, trainer_rounds.tokenizer_for(section))
  render = sft_episodes.renderer(section, tok)
  sft = sft_trainer.SFTConfig(**c.sft.to_dict())
  # the batch holds the rendered episodes, packed or not, with their masks
  batch, dropped = sft_trainer.demonstration_batch(None, tok, 0, sft, examples, c.seed, render)
  picked = dataset.pick(examples, 0, sft.batch_size, c.seed)
  turn_tokens = sum(len(tok.encode(t)) for e in picked for t in e.turns)
  assert dropped == 0 and int(batch["mask"].sum()) == turn_tokens
  packed, _ = sft_trainer.demonstration_batch(
      None, tok, 0, dataclasses.replace(sft, packing=True), examples, c.seed,
      render)
  assert int(packed["mask"].sum()) == turn_tokens

  workdir = str(tmp_path / "sft")
  result = sft_trainer.train(c, workdir)
  metrics = read_metrics(workdir)
  assert [m["step"] for m in metrics] == [1, 2]
  for step, m in enumerate(metrics):
    picked = dataset.pick(examples, step, sft.batch_size, c.seed)
    assert m["response_tokens"] == sum(len(tok.encode(t)) for e in picked for t in e.turns)
    assert math.isfinite(m["loss"]) and m["data/dropped_examples"] == 0
  assert tokenizer_fingerprint.read(result["export_dir"]) == tokenizer_fingerprint.of(tok)


def test_bad_cold_start_settings_get_clear_errors(tmp_path):
  c = grpo_episodes_sft.get_config("tiny")
  c.cold_start.domains = ("fs_chores",)
  with pytest.raises(ConfigError, match=r"cold_start.domains=.*not among episodes.domains"):
    sft_episodes.sections(c)
  c = grpo_episodes_sft.get_config("tiny")
  c.cold_start.difficulties = (4,)
  section, cold = sft_episodes.sections(c)
  with pytest.raises(ConfigError, match=r"cold_start.difficulties=.*data_questions.*"
                                        "difficulty must be 1, 2 or 3"):
    sft_episodes.draw_tasks(section, cold, 0)
  c.cold_start.tasks_per_level = 0
  with pytest.raises(ValueError, match="tasks_per_level"):
    sft_episodes.sections(c)
  c = grpo_episodes_sft.get_config("tiny")
  c.episodes.enabled = False
  with pytest.raises(ConfigError, match="episodes.enabled=False.*enabled episodes section"):
    sft_episodes.sections(c)
  # a file of episodes for a config without the episodes section it must be rendered with
  path = tmp_path / "e.jsonl"
  turn = {"role": "assistant", "content": "<tool_call>{}</tool_call>"}
  path.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}, turn]}) + "\n")
  c.sft.dataset = str(path)
  with pytest.raises(ConfigError, match="sft.dataset=.*holds multi-turn episodes"):
    sft_trainer.train(c, str(tmp_path / "w"))


@pytest.mark.parametrize("messages, problem", [
    ("x", "'messages' must be a list of at least two"),
    ([{"role": "user", "content": "q"}], "'messages' must be a list of at least two"),
    ([{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}],
     "message 1 has role 'tool' where 'assistant' belongs"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": 3}],
     "message 1 must be an object"),
    ([{"role": "system", "content": "q"}, {"role": "assistant", "content": "a"}],
     "message 0 must be an object with 'role' in"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
      {"role": "tool", "content": "r"}], "the last message must be an assistant turn"),
])
def test_bad_episode_lines_name_the_line_and_the_problem(tmp_path, messages, problem):
  path = tmp_path / "e.jsonl"
  path.write_text('{"prompt": "p", "response": "r"}\n' + json.dumps({"messages": messages}))
  with pytest.raises(ConfigError, match=f"sft.dataset=.*line 2: {problem}"):
    dataset.load_examples(str(path))
