"""SFT sequence packing: several demonstrations per row, the same loss as one per row."""

import jax
import numpy as np
import pytest

from configs import sft_arithmetic
from rl_post import models
from rl_post.data import batching
from rl_post.metrics.writers import read_metrics
from rl_post.sft import trainer as sft_trainer
from rl_post.sft.trainer import SFTConfig, make_sft_loss
from rl_post.tasks.arithmetic import Arithmetic

PROMPTS = ["What is 1+2?", "What is 47+38?", "What is 5+5?", "What is 12+345?", "What is 9+9?"]
RESPONSES = ["<answer>3</answer>", "<think>7+8+0=5,1 4+3+1=8,0</think>\n<answer>85</answer>",
             "<answer>10</answer>", "<answer>357</answer>", "<answer>18</answer>"]


def _lengths(tokenizer):
  return [len(batching.demonstration_ids(tokenizer, p, r)[0]) for p, r in zip(PROMPTS, RESPONSES)]


def test_first_fit_packing_keeps_each_demonstration_whole(tokenizer):
  lens = _lengths(tokenizer)
  max_len = max(lens) + min(lens)  # the longest fits with at most the shortest beside it
  batch, dropped = batching.pack_demonstrations(tokenizer, PROMPTS, RESPONSES, max_len)
  assert dropped == 0 and set(batch) == {"tokens", "mask", "positions", "segments"}
  rows = batch["tokens"].shape[0]
  assert 2 <= rows < len(PROMPTS) and all(a.shape == (rows, max_len) for a in batch.values())
  padded, mask, _ = batching.encode_demonstrations(tokenizer, PROMPTS, RESPONSES, max_len)
  # every packed segment is one demonstration: tokens and loss mask as padded one per row
  found = []
  for row in range(rows):
    for seg in range(1, batch["segments"][row].max() + 1):
      at = np.flatnonzero(batch["segments"][row] == seg)
      assert (np.diff(at) == 1).all()
      np.testing.assert_array_equal(batch["positions"][row, at], np.arange(at.size))
      found.append((batch["tokens"][row, at].tolist(), batch["mask"][row, at].tolist()))
  expected = [(padded[i, :n].tolist(), mask[i, :n].tolist()) for i, n in enumerate(lens)]
  assert sorted(found) == sorted(expected)
  pad = batch["segments"] == 0
  assert (batch["tokens"][pad] == tokenizer.pad_id).all() and not batch["mask"][pad].any()
  # rows come in multiples of row_multiple; only examples longer than max_len are dropped
  four, _ = batching.pack_demonstrations(tokenizer, PROMPTS, RESPONSES, max_len, 4)
  assert four["tokens"].shape[0] == 4 and not four["mask"][rows:].any()
  short, dropped_short = batching.pack_demonstrations(tokenizer, PROMPTS, RESPONSES, min(lens))
  assert dropped_short == sum(n > min(lens) for n in lens)
  assert short["segments"].max() == 1
  with pytest.raises(ValueError, match="row_multiple"):
    batching.pack_demonstrations(tokenizer, PROMPTS, RESPONSES, 64, 0)


def test_packed_loss_and_gradient_equal_one_per_row(tokenizer):
  """Attention and positions stay per demonstration: the packed batch's loss is the
  padded batch's (same examples, same params)."""
  c = sft_arithmetic.get_config("tiny")
  config = models.ModelConfig(**{**c.model.to_dict(), "vocab_size": 256 * (
      (tokenizer.vocab_size + 255) // 256)})
  params = models.init_params(config, jax.random.key(0))
  lens = _lengths(tokenizer)
  max_len = sum(lens)
  tokens, mask, _ = batching.encode_demonstrations(tokenizer, PROMPTS, RESPONSES, max_len)
  packed, dropped = batching.pack_demonstrations(tokenizer, PROMPTS, RESPONSES, max_len)
  assert dropped == 0 and packed["segments"].max() == len(PROMPTS)
  loss_fn = jax.jit(jax.value_and_grad(make_sft_loss(config), has_aux=True))
  (loss_a, aux_a), grads_a = loss_fn(params, {"tokens": tokens, "mask": mask}, None)
  (loss_b, aux_b), grads_b = loss_fn(params, packed, None)
  np.testing.assert_allclose(loss_b, loss_a, rtol=1e-5)
  np.testing.assert_allclose(aux_b["token_accuracy"], aux_a["token_accuracy"], rtol=1e-6)
  close = jax.tree.map(lambda a, b: np.allclose(a, b, rtol=1e-4, atol=1e-6), grads_a, grads_b)
  assert all(jax.tree.leaves(close))
  # without segment ids the rows would attend across demonstrations: a different loss
  (loss_c, _), _ = loss_fn(params, {k: packed[k] for k in ("tokens", "mask", "positions")}, None)
  assert abs(float(loss_c) - float(loss_a)) > 1e-4


def test_sft_trains_with_packing(tokenizer_path, tmp_path):
  c = sft_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.sft.update(num_steps=3, batch_size=16, packing=True, checkpoint_every=3)
  result = sft_trainer.train(c, str(tmp_path))
  rows = read_metrics(str(tmp_path))
  assert [r["step"] for r in rows] == [1, 2, 3]
  assert all(np.isfinite(r["loss"]) for r in rows)
  assert sum(r["data/dropped_examples"] for r in rows) == 0
  # 16 short arithmetic demonstrations per step fill fewer rows than 16
  assert all(r["response_tokens"] > 0 for r in rows) and result is not None


def test_packing_config_errors():
  with pytest.raises(ValueError, match="pack_row_multiple"):
    SFTConfig(packing=True, pack_row_multiple=0)
  with pytest.raises(ValueError, match="packing"):
    SFTConfig(packing=1)
  assert SFTConfig(batch_size=8, packing=True, pack_row_multiple=2).row_multiple == 2
  assert SFTConfig(batch_size=8).row_multiple == 8


def test_rows_twice_the_longest_hold_two_demonstrations_each(tokenizer):
  domain = Arithmetic(max_difficulty=2, operations="+")
  tasks = [domain.generate(np.random.default_rng(i), 2) for i in range(16)]
  prompts, responses = [t.prompt for t in tasks], [domain.demonstration(t) for t in tasks]
  longest = max(len(batching.demonstration_ids(tokenizer, p, r)[0])
                for p, r in zip(prompts, responses))
  batch, dropped = batching.pack_demonstrations(tokenizer, prompts, responses, 2 * longest)
  assert dropped == 0 and batch["tokens"].shape[0] <= 8
  assert (batch["segments"].max(axis=1) >= 2).all()
