"""Reward scoring: per-domain component weights, checks of verdicts, process credit."""

import numpy as np
import pytest

from rl_fixtures import FAULTY_DOMAIN
from rl_post.config_sections import from_section
from rl_post.rewards import process_credit, verdicts
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardConfig, combine, reward_metrics
from rl_post.tasks.base import Task, Verdict


def _task(domain="a"):
  return Task("t", domain, "p", 1, None)


def test_weights_per_domain_combine_components():
  config = RewardConfig(weights={"default": {"outcome": 1.0, "format": 0.25},
                                 "b": {"format": 0.0, "efficiency": 0.5}})
  tasks = [_task("a"), _task("a"), _task("b"), _task("b")]
  vs = [Verdict(1.0, True), Verdict(0.5, False, components={"efficiency": 1.0}),
        Verdict(0.25, True, components={"efficiency": 0.5}), Verdict(1.0, True)]
  batch = combine(tasks, vs, [None, None, None, "timeout"], config)
  np.testing.assert_allclose(batch.rewards_N, [1.25, 0.5, 0.25 + 0.25, 0.0])
  np.testing.assert_array_equal(batch.correct_N, [True, False, False, False])
  np.testing.assert_allclose(batch.components["efficiency"], [0, 1.0, 0.5, 0])
  assert batch.error_counts == {"timeout": 1, "crash": 0, "verifier_error": 0,
                                "invalid_verdict": 0} and batch.errors == 1
  metrics = reward_metrics(tasks, batch)
  assert metrics["reward/b/efficiency"] == 0.25 and metrics["reward/a/outcome"] == 0.75
  assert metrics["reward/errors/timeout"] == 1 and metrics["reward/b/mean"] == 0.25
  assert metrics["reward/b/errors"] == 1 and metrics["reward/a/errors"] == 0  # per domain


def test_process_component_is_mean_step_score_unless_given():
  steps = ((0, 3, 1.0), (3, 9, 0.0))
  config = RewardConfig(weights={"default": {"outcome": 0.0, "process": 1.0}})
  batch = combine([_task()] * 2, [Verdict(0.0, True, step_scores=steps),
                                  Verdict(0.0, True, components={"process": 0.2},
                                          step_scores=steps)], [None, None], config)
  np.testing.assert_allclose(batch.rewards_N, [0.5, 0.2])


@pytest.mark.parametrize("weights, message", [
    ({"default": {"outcome": float("nan")}}, "rewards.weights.default.outcome must be a finite"),
    ({"code": {"mean": 1.0}}, "rewards.weights.code.mean needs a component name"),
    ({"code": 1.0}, "rewards.weights.code must be a mapping"),
])
def test_bad_weights_name_the_field(weights, message):
  with pytest.raises(ValueError, match=message):
    from_section(RewardConfig, {"weights": weights}, "rewards")


def test_bad_sandbox_options_name_the_field():
  with pytest.raises(ValueError, match="rewards.sandbox: .*isolation"):
    from_section(RewardConfig, {"sandbox": {"isolation": "none"}}, "rewards")


@pytest.mark.parametrize("raw, kind", [
    ({**verdicts.raw_fields(Verdict(1.0, True)), "score": float("nan")}, "invalid_verdict"),
    ({**verdicts.raw_fields(Verdict(1.0, True)), "score": 1e300}, "invalid_verdict"),
    ({**verdicts.raw_fields(Verdict(1.0, True)), "format_ok": 0.5}, "invalid_verdict"),
    ({**verdicts.raw_fields(Verdict(1.0, True)), "answer": 3}, "invalid_verdict"),
    ({**verdicts.raw_fields(Verdict(1.0, True)), "components": {"x": -1}}, "invalid_verdict"),
    ({"score": 1.0}, "invalid_verdict"),
    (verdicts.raw_fields({"score": 1.0}), "invalid_verdict"),
    (verdicts.failure("crash", "gone"), "crash"),
    (verdicts.raw_fields(Verdict(0.5, True, "x")), None),
])
def test_checked_rebuilds_verdicts_on_the_trusted_side(raw, kind):
  verdict, got = verdicts.checked(raw)
  assert got == kind
  assert (verdict.score == 0.0) if kind else verdict == Verdict(0.5, True, "x")


def test_in_process_and_pool_agree():
  tasks = [Task("a", "arithmetic", "What is 1+1?", 1, 2, {"a": 1, "b": 1, "op": "+"})] * 2
  completions = ["<think>1+1+0=2,0</think>\n<answer>2</answer>", "<answer>3</answer>"]
  with RewardPool(RewardConfig(num_workers=0)) as local, \
       RewardPool(RewardConfig(num_workers=1)) as pool:
    a, b = local.score(tasks, completions), pool.score(tasks, completions)
  assert a.verdicts == b.verdicts and a.correct_N.tolist() == [True, False]
  np.testing.assert_array_equal(a.rewards_N, b.rewards_N)


def test_in_process_path_counts_invalid_verdicts_too():
  with RewardPool(RewardConfig(num_workers=0)) as pool:
    batch = pool.score([_task(FAULTY_DOMAIN)] * 3, ["nan", "raise", "7"])
  assert batch.error_kinds == ["invalid_verdict", "verifier_error", None]
  np.testing.assert_allclose(batch.rewards_N, [0.0, 0.0, 1.1], rtol=1e-6)


def test_spans_map_to_the_tokens_they_touch():
  # tokens decode to "ab", "cde", "", "f": char ends 2, 5, 5, 6
  score_T, covered_T = process_credit.spans_to_tokens_T(((0, 1, 0.5), (4, 6, 1.0)), [2, 5, 5, 6])
  np.testing.assert_allclose(score_T, [0.5, 1.0, 0.0, 1.0])
  np.testing.assert_array_equal(covered_T, [True, True, False, True])
  ends = process_credit.token_char_ends(lambda ids: "".join("xyz"[i] * (i + 1) for i in ids),
                                        [0, 2, 1])
  np.testing.assert_array_equal(ends, [1, 4, 6])


def test_token_rewards_batch_masks_padding():
  vs = [Verdict(1.0, True, step_scores=((0, 10, 0.25),)), Verdict(0.0, False)]
  score_NxT, covered_NxT = process_credit.token_rewards_NxT(
      vs, np.array([[3, 6, 6], [1, 2, 3]]), np.array([[1, 1, 0], [1, 1, 1]]))
  np.testing.assert_allclose(score_NxT, [[0.25, 0.25, 0], [0, 0, 0]])
  assert covered_NxT.sum() == 2
  with pytest.raises(ValueError, match="need N verdicts"):
    process_credit.token_rewards_NxT(vs, np.zeros((2, 3)), np.zeros((2, 4)))


def test_reward_batch_token_rewards_skip_failed_completions():
  steps = ((0, 4, 0.75),)
  batch = combine([_task()] * 2, [Verdict(1.0, True, step_scores=steps),
                                  Verdict(1.0, True, step_scores=steps)], [None, "crash"],
                  RewardConfig())
  score_NxT, covered_NxT = batch.token_rewards_NxT(np.array([[2, 4], [2, 4]]), np.ones((2, 2)))
  np.testing.assert_allclose(score_NxT, [[0.75, 0.75], [0, 0]])
  np.testing.assert_array_equal(covered_NxT, [[True, True], [False, False]])
