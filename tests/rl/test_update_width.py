"""rl.width_multiple: the update runs the rollout cut after its longest row."""

import numpy as np
import pytest

from rl_post.metrics.writers import read_metrics
from rl_post.rl import config as rl_config
from rl_post.rl import trainer
from rl_post.rl.train_step import trim_batch, used_width
from tiny_grpo import tiny_digit_config
from run_metrics import MEASURED

VOLATILE = MEASURED


def _mask(width, *spans):
  mask = np.zeros((len(spans), width), np.int32)
  for row, (start, end) in enumerate(spans):
    mask[row, start:end] = 1
  return mask


def test_used_width_rounds_the_last_row_end_up():
  rl = rl_config.load(dict(width_multiple=16))
  assert used_width(rl, [10, 12], _mask(64, (10, 15), (12, 32))) == 32  # ends 15 and 32
  assert used_width(rl, [10, 12], _mask(64, (10, 15), (12, 33))) == 48  # 33 -> 48
  assert used_width(rl, [30], _mask(56, (30, 56))) == 56  # never past the rollout
  assert used_width(rl, [20, 3], _mask(64, (0, 0), (3, 4))) == 32  # an empty response: its prompt
  gap = _mask(64, (5, 9))
  gap[0, 37] = 1  # an appended token after a gap still counts
  assert used_width(rl, [5], gap) == 48
  assert used_width(rl_config.load(dict(width_multiple=0)), [3], _mask(40, (3, 4))) == 40  # off
  assert used_width(rl_config.load(dict(width_multiple=5)), [3], _mask(40, (3, 7))) == 10


def test_trim_batch_cuts_every_time_axis():
  batch = dict(tokens=np.arange(12).reshape(2, 6), adv=np.ones((2, 6)), keep=np.ones(2))
  out = trim_batch(batch, 4)
  assert out["tokens"].tolist() == [[0, 1, 2, 3], [6, 7, 8, 9]]
  assert out["adv"].shape == (2, 4) and out["keep"].shape == (2,)


@pytest.mark.parametrize("value", [-1, 1.5])
def test_bad_width_multiple_is_a_config_error(value):
  with pytest.raises(ValueError, match="width_multiple"):
    rl_config.load(dict(width_multiple=value))


def test_a_trimmed_run_logs_the_numbers_of_a_full_width_run(tokenizer_path, tmp_path):
  runs = {}
  for multiple in (16, 0):
    workdir = str(tmp_path / f"w{multiple}")
    trainer.train(tiny_digit_config(tokenizer_path, num_steps=2, width_multiple=multiple),
                  workdir)
    runs[multiple] = [{k: v for k, v in m.items() if not k.startswith(VOLATILE)}
                      for m in read_metrics(workdir)]
  widths = {k: [m.pop("rollout/update_width") for m in rows] for k, rows in runs.items()}
  # prompts of 17-24 tokens pad to 32, + 6 response tokens: 38 wide; rows end by 30
  assert widths[0] == [38.0, 38.0]
  assert all(w < 38 and w % 16 == 0 for w in widths[16]), widths
  for a, b in zip(runs[16], runs[0]):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-3, atol=1e-5, err_msg=k)


def test_episodes_trimmed_and_full_width_log_the_same_numbers(tmp_path):
  """Multi-turn rows hold appended tool tokens: the width must keep all of them."""
  from configs import grpo_episodes
  runs = {}
  for multiple in (8, 0):
    c = grpo_episodes.get_config("tiny")
    c.rl.update(num_steps=2, checkpoint_every=2, width_multiple=multiple)
    trainer.train(c, str(tmp_path / f"w{multiple}"))
    runs[multiple] = [{k: v for k, v in m.items()
                       if not k.startswith(VOLATILE) and "seconds" not in k and "time" not in k}
                      for m in read_metrics(str(tmp_path / f"w{multiple}"))]
  widths = {k: [m.pop("rollout/update_width") for m in rows] for k, rows in runs.items()}
  # the tiny episodes are 640 wide; their rows end earlier (576 and 608 here)
  assert all(w <= f for w, f in zip(widths[8], widths[0])) and widths[8] != widths[0], widths
  for a, b in zip(runs[8], runs[0]):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-3, atol=1e-5, err_msg=k)
