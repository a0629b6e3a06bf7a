"""rl.process_credit: the process component as per-step token rewards, through the trainer."""

import jax
import numpy as np
import pytest

from rl_fixtures import STEP_DOMAIN
from rl_post.metrics.writers import read_metrics
from rl_post.rewards import process_credit
from rl_post.rl import config as rl_config
from rl_post.rl import trainer
from rl_post.rl.train_step import rollout_batch
from rl_post.tasks.base import Verdict
from tiny_grpo import tiny_digit_config


def _one_char_decode(text):
  return lambda ids: text[:len(ids)]


def test_step_end_rewards_split_the_total_over_right_steps():
  text = "ab12cd3"
  verdicts = [Verdict(1.0, True, step_scores=((2, 3, 1.0), (3, 4, 0.0), (6, 7, 0.5))),
              Verdict(0.0, True), Verdict(1.0, True, step_scores=((0, 2, 0.0),))]
  tokens = np.zeros((3, 9), np.int32)
  mask = np.zeros((3, 9), np.int32)
  mask[:, 1:8] = 1  # response tokens at positions 1..7, one character each
  decode = _one_char_decode(text)
  out = process_credit.step_end_rewards_NxT(verdicts, np.array([0.6, 0.0, 0.3]), tokens, mask,
                                            decode)
  np.testing.assert_allclose(out.sum(axis=1), [0.6, 0.0, 0.3], rtol=1e-6)
  # row 0: the "1" (char 2 -> position 3) gets 1/1.5 of 0.6, the "3" (char 6 -> 7) 0.5/1.5
  expected = np.zeros(9, np.float32)
  expected[3], expected[7] = 0.4, 0.2
  np.testing.assert_allclose(out[0], expected, rtol=1e-6)
  # row 2: no step above 0, so the total lands on the last response token
  assert out[2, 7] == pytest.approx(0.3) and out[2, :7].sum() == 0
  assert not out[1].any()
  # a step that ends inside a multi-character token lands on that token
  spans = [Verdict(1.0, True, step_scores=((0, 3, 1.0),))]
  pieces = ["ab", "cd", "e"]
  merged = process_credit.step_end_rewards_NxT(
      spans, np.array([1.0]), np.zeros((1, 3), np.int32), np.ones((1, 3), np.int32),
      lambda ids: "".join(pieces[:len(ids)]))
  np.testing.assert_allclose(merged, [[0.0, 1.0, 0.0]])
  with pytest.raises(ValueError, match="need N"):
    process_credit.step_end_rewards_NxT(verdicts[:2], np.ones(3), tokens, mask, decode)


def test_token_process_credit_changes_per_token_returns_not_group_advantages():
  """GRPO sums a sequence's token rewards back (same advantages); REINFORCE++
  credits each token only with the steps after it."""
  mask = np.ones((4, 5), np.int32)
  tokens = np.zeros((4, 5), np.int32)
  logp = np.zeros((4, 5), np.float32)
  process = np.zeros((4, 5), np.float32)
  process[0, 1], process[1, 3], process[2, 4] = 0.5, 0.5, 0.25
  totals = process.sum(axis=1)
  rewards = np.array([1.0, 0.0, 1.0, 0.0], np.float32) + totals
  for name, same in (("grpo", True), ("rloo", True), ("reinforce_pp", False)):
    rl = rl_config.load({"algorithm": name, "batch_size": 1, "num_generations": 4,
                         "max_new_tokens": 5, name: dict(kl_coef=0.0)})
    seq = rollout_batch(rl, tokens, mask, logp, rewards)
    tok = rollout_batch(rl, tokens, mask, logp, rewards - totals, process_NxT=process)
    assert np.allclose(seq["adv"], tok["adv"], atol=1e-6) == same, name


def _config(tokenizer_path, credit, algorithm="grpo"):
  c = tiny_digit_config(tokenizer_path, num_steps=2, algorithm=algorithm, process_credit=credit)
  c.tasks.domains = (STEP_DOMAIN,)
  c.rewards.num_workers = 0
  c.rewards.weights = dict(default=dict(outcome=1.0, format=0.0, process=0.5))
  return c


def test_trainer_token_credit_equals_sequence_credit_for_grpo(tokenizer_path, tmp_path):
  runs = {credit: trainer.train(_config(tokenizer_path, credit), str(tmp_path / credit))
          for credit in ("sequence", "token")}
  seq, tok = (read_metrics(str(tmp_path / c)) for c in ("sequence", "token"))
  assert [m["step"] for m in tok] == [1, 2]
  process = [m[f"reward/{STEP_DOMAIN}/process"] for m in tok]
  assert all(0 < p < 1 for p in process), process  # mixed right and wrong steps: not vacuous
  for key in ("loss", "grad_norm", "reward/mean"):
    np.testing.assert_allclose([m[key] for m in tok], [m[key] for m in seq], rtol=1e-5,
                               atol=1e-7, err_msg=key)
  close = jax.tree.map(lambda a, b: np.allclose(np.asarray(a), np.asarray(b), atol=1e-6),
                       runs["sequence"]["state"].params, runs["token"]["state"].params)
  assert all(jax.tree.leaves(close))


def test_process_credit_config_errors():
  with pytest.raises(ValueError, match="rl.process_credit"):
    rl_config.load(dict(process_credit="step"))
