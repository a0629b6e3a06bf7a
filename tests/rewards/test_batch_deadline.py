"""A deadline per reward batch (rewards.batch_timeout_s): hung verifiers cost
the batch its deadline, not timeout_s each; what was verified in time keeps its
score; the workers inside the hung units are replaced and leave nothing behind.

Times are asserted with wide margins only: "returns long before N x timeout_s".
"""

import time

import numpy as np
import pytest

from process_tree import descendants, wait_gone
from rl_fixtures import BATCH_DOMAIN, FAULTY_DOMAIN
from rl_post.rewards.pool import RewardPool
from rl_post.rewards.scoring import RewardConfig, reward_metrics
from rl_post.tasks.base import Task

HANG_S = 600  # FaultyVerifier's "hang" sleeps this long; timeout_s is set above it


def _tasks(n, domain=FAULTY_DOMAIN):
  return [Task(str(i), domain, "p", 1, None) for i in range(n)]


def test_config_checks_the_batch_deadline():
  assert RewardConfig().batch_timeout_s == 0.0  # off: today's per-completion budgets only
  for bad in (-1.0, float("inf"), float("nan"), True):
    with pytest.raises(ValueError, match="batch_timeout_s"):
      RewardConfig(batch_timeout_s=bad)


def test_a_batch_of_hung_verifiers_returns_at_its_deadline():
  config = RewardConfig(num_workers=2, timeout_s=HANG_S + 60, batch_timeout_s=2.0)
  with RewardPool(config) as pool:
    old = pool.worker_pids()
    start = time.monotonic()
    batch = pool.score(_tasks(16), ["hang"] * 16)
    assert time.monotonic() - start < 30  # without the deadline: 16 x timeout_s
    assert batch.error_kinds == ["timeout"] * 16
    assert batch.error_counts["timeout"] == 16 and batch.deadline_timeouts == 16
    assert not batch.rewards_N.any()
    assert "batch deadline" in batch.verdicts[0].error
    metrics = reward_metrics(_tasks(16), batch)
    assert metrics["reward/errors/timeout"] == 16 and metrics["reward/deadline_timeouts"] == 16
    assert pool.replaced == 2 and pool.deadline_timeouts == 16
    assert not wait_gone(old)  # the hung workers were killed, not left running
    again = pool.score(_tasks(4), ["1", "2", "y", "3"])  # the replacements work
    assert again.errors == 0 and again.correct_N.tolist() == [True, True, False, True]
    assert again.deadline_timeouts == 0


def test_completions_verified_before_the_deadline_keep_their_scores():
  config = RewardConfig(num_workers=2, timeout_s=HANG_S + 60, batch_timeout_s=4.0)
  with RewardPool(config) as pool:
    # two jobs of four, one per worker; each hangs on its third completion
    texts = ["1", "2", "hang", "5", "3", "y", "hang", "4"]
    start = time.monotonic()
    batch = pool.score(_tasks(8), texts)
    assert time.monotonic() - start < 30
    assert batch.error_kinds == [None, None, "timeout", "timeout"] * 2
    assert batch.deadline_timeouts == 4 and pool.replaced == 2
    np.testing.assert_allclose(batch.rewards_N, [1.1, 1.1, 0, 0, 1.1, 0.1, 0, 0], rtol=1e-6)


def test_a_batch_awaited_after_its_deadline_keeps_what_was_verified():
  """The async path: the batch is submitted, the caller generates the next one
  meanwhile, then waits; the deadline runs from submit."""
  config = RewardConfig(num_workers=1, timeout_s=HANG_S + 60, batch_timeout_s=2.0)
  with RewardPool(config) as pool:
    pending = pool.submit(_tasks(4), ["1", "2", "hang", "3"])
    time.sleep(4.0)  # past the deadline before anyone waits
    start = time.monotonic()
    batch = pending.result()
    assert time.monotonic() - start < 10
    assert batch.error_kinds == [None, None, "timeout", "timeout"]
    assert batch.correct_N.tolist() == [True, True, False, False]
    assert pool.score(_tasks(2), ["1", "2"]).correct_N.all()


def test_an_unfinished_batch_does_not_hold_up_the_next():
  """Two batches in flight (async staleness 1): the first one's hung work is
  stopped at its deadline; the second, submitted later, is scored in full."""
  config = RewardConfig(num_workers=1, timeout_s=HANG_S + 60, batch_timeout_s=8.0)
  with RewardPool(config) as pool:
    first = pool.submit(_tasks(3), ["1", "hang", "2"])
    time.sleep(7.0)
    second = pool.submit(_tasks(3), ["3", "x", "4"])  # queued behind the hung unit
    a = first.result()
    b = second.result()
    assert a.error_kinds == [None, "timeout", "timeout"] and a.deadline_timeouts == 2
    assert b.errors == 0 and b.correct_N.tolist() == [True, False, True]


def test_sandboxed_programs_of_an_expired_batch_leave_nothing_behind():
  """A batch-verifying domain whose programs sleep in the sandbox: the worker
  and its sandbox processes are gone after the deadline."""
  config = RewardConfig(num_workers=1, timeout_s=HANG_S + 60, batch_timeout_s=3.0,
                        sandbox={"isolation": "process", "num_workers": 1,
                                 "timeout_s": HANG_S})
  with RewardPool(config) as pool:
    assert pool.score(_tasks(1, BATCH_DOMAIN), ["print(1)"]).correct_N.all()  # sandbox up
    old = pool.worker_pids()
    pending = pool.submit(_tasks(2, BATCH_DOMAIN), ["import time; time.sleep(600)"] * 2)
    time.sleep(1.0)  # let the programs start
    doomed = old + sorted(descendants(old))
    assert len(doomed) >= 2  # the worker and at least one sandbox process
    batch = pending.result()
    assert batch.error_kinds == ["timeout", "timeout"] and batch.deadline_timeouts == 2
    assert not wait_gone(doomed)
    assert pool.score(_tasks(1, BATCH_DOMAIN), ["print(1)"]).correct_N.all()


def test_starting_s_is_the_union_of_worker_start_ups_in_the_window():
  from rl_post.rewards.pool import starting_s
  assert starting_s([], 0.0, 10.0) == 0.0
  assert starting_s([[1.0, 3.0], [2.0, 4.0], [6.0, None]], 0.0, 8.0) == 5.0  # 1-4, 6-8
  assert starting_s([[1.0, 3.0], [2.0, 4.0]], 2.5, 8.0) == 1.5  # only after `since`
  assert starting_s([[0.0, 9.0], [1.0, 2.0]], 0.0, 5.0) == 5.0  # up to `now`
