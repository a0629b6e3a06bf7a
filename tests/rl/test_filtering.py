"""Dynamic filtering: zero-variance groups are dropped and the batch refilled."""

import dataclasses

import numpy as np
import pytest

from rl_post.config_sections import from_section
from rl_post.rl import filtering
from rl_post.rl.filtering import FilterConfig

G, B = 4, 3


@dataclasses.dataclass
class _Scored:
  rewards_N: np.ndarray
  errors: int


def _round(groups, tag):
  """A round tree like the trainer's: tasks, token rows, a scored batch."""
  rewards = np.array([r for g in groups for r in g], np.float32)
  n = len(rewards)
  return {"tasks_N": [f"{tag}/{i // G}" for i in range(n)],
          "tokens_NxT": np.arange(n * 2).reshape(n, 2) + 1000 * tag,
          "scored": _Scored(rewards, errors=1), "ref": None}


ROUNDS = [
    _round([[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], 0),  # one informative group
    _round([[0, 0, 0, 0], [1, 1, 1, 1], [0.5, 0.5, 0.5, 0.5]], 1),  # none
    _round([[1, 0, 1, 1], [0, 0, 0.1, 0], [0, 1, 1, 1]], 2),  # three
]


def _collect(rounds, **config):
  drawn = []

  def draw(r):
    drawn.append(r)
    return rounds[r]

  out = filtering.collect(draw, lambda t: t["scored"].rewards_N, B, G, FilterConfig(**config))
  return out, drawn


def test_informative_groups():
  mask = filtering.informative_groups(np.array([1, 1, 0, 1, 0.2, 0.2]), 2)
  np.testing.assert_array_equal(mask, [False, True, False])
  with pytest.raises(ValueError, match="do not split into groups"):
    filtering.informative_groups(np.zeros(5), 2)


def test_drops_zero_variance_groups_and_refills():
  (batch, scored, metrics), drawn = _collect(ROUNDS, enabled=True, max_rounds=5)
  assert drawn == [0, 1, 2]  # stops once B informative groups are in hand
  assert batch["tasks_N"] == ["0/1"] * G + ["2/0"] * G + ["2/1"] * G
  groups = batch["scored"].rewards_N.reshape(B, G)
  assert (groups.std(axis=1) > 0).all()
  np.testing.assert_array_equal(batch["tokens_NxT"][:G], ROUNDS[0]["tokens_NxT"][G:2 * G])
  np.testing.assert_array_equal(batch["tokens_NxT"][G:], ROUNDS[2]["tokens_NxT"][:2 * G])
  assert batch["ref"] is None and batch["scored"].errors == 3  # counters add over rounds
  assert len(scored["tasks_N"]) == 3 * B * G  # every scored row, for statistics
  assert metrics == {"filtering/rounds": 3.0, "filtering/extra_prompts": 6.0,
                     "filtering/dropped_groups": 5.0, "filtering/informative_frac": 4 / 9,
                     "filtering/padded_groups": 0.0}


def test_rounds_are_bounded_and_the_batch_is_padded():
  (batch, _, metrics), drawn = _collect(ROUNDS, enabled=True, max_rounds=1)
  assert drawn == [0, 1]
  assert batch["tasks_N"] == ["0/1"] * G + ["0/0"] * G + ["0/2"] * G  # informative first
  assert metrics["filtering/padded_groups"] == 2.0
  assert batch["tokens_NxT"].shape == (B * G, 2)


def test_disabled_returns_round_zero_untouched():
  (batch, scored, metrics), drawn = _collect(ROUNDS, enabled=False, max_rounds=5)
  assert drawn == [0] and batch is ROUNDS[0] and scored is ROUNDS[0] and metrics == {}


def test_bad_config_and_leaf():
  with pytest.raises(ValueError, match="filtering.max_rounds must be >= 0"):
    from_section(FilterConfig, {"max_rounds": -1}, "filtering")
  with pytest.raises(ValueError, match="cannot gather rows of a str leaf"):
    filtering.gather(["x"], [(0, 0)], 1, 1)


def test_a_component_only_some_rounds_have_counts_zero_in_the_others():
  """Round 0 drew no extraction task, round 1 did: its json_valid rows survive,
  round 0's rows get 0 (a RewardBatch's 'absent' value), the keys are the union."""
  n = B * G
  rounds = [{"outcome": np.ones(n, np.float32)},
            {"outcome": np.zeros(n, np.float32), "json_valid": np.full(n, 0.5, np.float32)}]
  picks = [(0, 0), (1, 2)]
  out = filtering.gather(rounds, picks, G, n)
  assert set(out) == {"outcome", "json_valid"}
  np.testing.assert_array_equal(out["outcome"], [1] * G + [0] * G)
  np.testing.assert_array_equal(out["json_valid"], [0] * G + [0.5] * G)
  with pytest.raises(ValueError, match="'errors' is missing from some rounds"):
    filtering.gather([{"errors": 1}, {}], picks, G, n)


def test_token_rows_of_different_widths_are_right_padded_with_zeros():
  """Rounds whose prompts were bucketed to different widths (T = 3 and T = 5)."""
  n = B * G
  rounds = [{"tokens_NxT": np.ones((n, 3), np.int32), "mask_NxT": np.ones((n, 3), np.int32)},
            {"tokens_NxT": np.full((n, 5), 2, np.int32), "mask_NxT": np.ones((n, 5), np.int32)}]
  out = filtering.gather(rounds, [(0, 1), (1, 0)], G, n)
  assert out["tokens_NxT"].shape == (2 * G, 5)
  np.testing.assert_array_equal(out["tokens_NxT"][0], [1, 1, 1, 0, 0])
  np.testing.assert_array_equal(out["mask_NxT"][0], [1, 1, 1, 0, 0])  # padding is masked out
  np.testing.assert_array_equal(out["tokens_NxT"][-1], [2] * 5)
