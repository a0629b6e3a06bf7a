"""Reward pool: scores in worker processes, counts timeouts and crashes."""

import numpy as np

from rl_fixtures import SLOW_DOMAIN
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardConfig, combine, verify_all
from rl_post.tasks.base import Task, Verdict


def _tasks(n, domain=SLOW_DOMAIN):
  return [Task(task_id=str(i), domain=domain, prompt="p", difficulty=1, target=None)
          for i in range(n)]


def test_weights_combine_components():
  verdicts = [Verdict(True, True), Verdict(True, False), Verdict(False, True),
              Verdict(False, False, None, "timeout")]
  batch = combine(verdicts, RewardConfig(outcome_weight=1.0, format_weight=0.25))
  np.testing.assert_allclose(batch.rewards_N, [1.25, 1.0, 0.25, 0.0])
  assert batch.errors == 1


def test_pool_scores_and_survives_hangs_and_crashes():
  config = RewardConfig(timeout_s=3.0, num_workers=2)
  with RewardPool(config) as pool:
    ok = pool.score(_tasks(4), ["1", "x", "22", "y"])
    np.testing.assert_array_equal(ok.components["outcome"], [1, 0, 1, 0])
    assert ok.errors == 0
    # worker 1 gets items 0-1, worker 2 items 2-3; item 2 hangs, item 0 crashes
    bad = pool.score(_tasks(4), ["crash 1", "5", "hang 3", "4"])
    assert bad.verdicts[0].error.startswith("verifier error")
    assert bad.verdicts[1].correct
    assert [v.error for v in bad.verdicts[2:]] == ["timeout", "timeout"]
    assert bad.errors == 3 and pool.timeouts == 1
    again = pool.score(_tasks(2), ["9", "z"])  # the pool was replaced and still works
    np.testing.assert_array_equal(again.components["outcome"], [1, 0])


def test_in_process_verify_all_matches_pool():
  tasks = [Task("a", "arithmetic", "What is 1+1?", 1, 2, {"a": 1, "b": 1, "op": "+"})] * 2
  completions = ["<think>1+1+0=2,0</think>\n<answer>2</answer>", "<answer>3</answer>"]
  local = verify_all(tasks, completions)
  with RewardPool(RewardConfig(num_workers=1)) as pool:
    remote = pool.score(tasks, completions).verdicts
  assert local == remote and [v.correct for v in local] == [True, False]
