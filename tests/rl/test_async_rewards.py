"""Async rewards: the pipeline's bounds, sync equivalence at staleness 0, exact resume."""

import jax
import numpy as np
import pytest

from rl_post.errors import ConfigError
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer
from rl_post.rl.async_rewards import RolloutPipeline, launch_horizon
from digit_runs import digit_config
from run_metrics import computed_rows

VOLATILE = ("async/",)  # beside the machine's measurements (run_metrics.MEASURED)


def test_launch_horizon_bounds_staleness_end_and_checkpoints():
  assert launch_horizon(0, 0, 10, 100) == 0
  assert launch_horizon(0, 2, 10, 100) == 2
  assert launch_horizon(8, 3, 10, 100) == 9  # never past the run
  assert launch_horizon(0, 5, 10, 2) == 1  # iteration 1 ends in a save: drained there
  assert launch_horizon(1, 5, 10, 2) == 1
  assert launch_horizon(2, 5, 10, 2) == 3
  with pytest.raises(ValueError, match="bad pipeline bounds"):
    launch_horizon(10, 1, 10, 2)


def test_pipeline_order_and_staleness():
  launched = []

  def launch(j):
    launched.append((j, version))
    return f"batch{j}"

  pipe = RolloutPipeline(staleness=2, num_steps=5, checkpoint_every=100)
  stale = []
  for version in range(5):  # the policy version is the iteration when filling
    entry, metrics = pipe.next(version, launch)
    assert entry.payload == f"batch{version}" and entry.iteration == version
    stale.append(metrics["async/staleness"])
  assert launched == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 2)]
  assert stale == [0, 1, 2, 2, 2]
  assert len(pipe) == 0
  with pytest.raises(ValueError, match="async_staleness"):
    RolloutPipeline(-1, 5, 1)


def test_pipeline_drain_then_refill_from_current_policy():
  pipe = RolloutPipeline(staleness=1, num_steps=6, checkpoint_every=100)
  pipe.fill(0, lambda j: j)
  assert len(pipe) == 2
  with pytest.raises(RuntimeError, match="drain"):
    pipe.fill(3, lambda j: j)  # a rollback to 3 with stale rollouts of 0, 1 queued
  assert pipe.drain() == 2
  entry, metrics = pipe.next(3, lambda j: j)
  assert entry.iteration == 3 and metrics["async/staleness"] == 0
  with pytest.raises(RuntimeError, match="fill"):
    pipe.pop(5)


def _stable(rows):
  return computed_rows(rows, VOLATILE)


def test_staleness_zero_matches_sync(tokenizer_path, tmp_path):
  sync = trainer.train(digit_config(tokenizer_path), str(tmp_path / "sync"))
  async0 = trainer.train(digit_config(tokenizer_path, async_rewards=True, async_staleness=0),
                         str(tmp_path / "async0"))
  a, b = read_metrics(str(tmp_path / "sync")), read_metrics(str(tmp_path / "async0"))
  assert _stable(a) == _stable(b)
  assert [m["async/staleness"] for m in b] == [0, 0, 0, 0]
  same = jax.tree.map(lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)),
                      sync["state"].params, async0["state"].params)
  assert all(jax.tree.leaves(same))


def test_staleness_one_records_lag_and_resumes_exactly(tokenizer_path, tmp_path):
  config = digit_config(tokenizer_path, async_rewards=True, async_staleness=1)
  straight = trainer.train(config, str(tmp_path / "straight"))
  a = read_metrics(str(tmp_path / "straight"))
  # checkpoint_every=2 drains the pipeline at steps 2 and 4: batches 1 and 3 are one update stale
  assert [m["async/staleness"] for m in a] == [0, 1, 0, 1]
  config.rl.num_steps = 2  # "crash" after step 2, then rerun the same command
  trainer.train(config, str(tmp_path / "resumed"))
  config.rl.num_steps = 4
  resumed = trainer.train(config, str(tmp_path / "resumed"))
  b = read_metrics(str(tmp_path / "resumed"))
  assert [m["step"] for m in b] == [1, 2, 3, 4]
  assert _stable(a) == _stable(b)
  assert [m["async/staleness"] for m in b] == [0, 1, 0, 1]
  same = jax.tree.map(lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)),
                      straight["state"].params, resumed["state"].params)
  assert all(jax.tree.leaves(same))


def test_async_with_dynamic_filtering_is_refused(tokenizer_path, tmp_path):
  config = digit_config(tokenizer_path, async_rewards=True)
  config.filtering.enabled = True
  with pytest.raises(ConfigError, match="async_rewards needs filtering.enabled=False"):
    trainer.train(config, str(tmp_path))


def test_async_batches_are_bounded_by_the_reward_batch_deadline(tokenizer_path, tmp_path):
  """Half the verifiers hang for 600 s; with a batch deadline of a few seconds
  the async run finishes, counting the hung completions as timeouts."""
  import time
  from rl_fixtures import FAULTY_DOMAIN
  config = digit_config(tokenizer_path, async_rewards=True, async_staleness=1, num_steps=3,
                   checkpoint_every=100)
  config.tasks.update(domains=(FAULTY_DOMAIN,),
                      domain_options={FAULTY_DOMAIN: {"faults": ("hang", None)}})
  config.rewards.update(num_workers=2, timeout_s=900.0, batch_timeout_s=4.0)
  start = time.monotonic()
  trainer.train(config, str(tmp_path))
  assert time.monotonic() - start < 400  # without the deadline: 900 s per hung completion
  rows = read_metrics(str(tmp_path))
  assert [m["step"] for m in rows] == [1, 2, 3]
  assert [m["async/staleness"] for m in rows] == [0, 1, 1]
  assert all(0 < m["reward/deadline_timeouts"] <= m["reward/errors/timeout"] for m in rows)
  assert all(np.isfinite(m["loss"]) for m in rows)
