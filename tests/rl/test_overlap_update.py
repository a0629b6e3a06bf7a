"""Rollouts overlapped with the update (rl.overlap_update): which iterations overlap,
the sampler's copy outliving the update's donation, the synchronous numbers where
nothing overlaps, staleness and exact resume, the off-policy gap of stale batches."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import grpo_arithmetic
from rl_post.errors import ConfigError
from rl_post.metrics.writers import read_metrics
from rl_post.rl import components, overlap_update, single_turn_source, trainer
from rl_post.rl import config as rl_config
from rl_post.rl.async_rewards import RolloutPipeline
from digit_runs import digit_config
from run_metrics import computed_rows

VOLATILE = ("async/", "overlap/")  # beside the machine's measurements (run_metrics.MEASURED)


def _rl(**fields):
  return rl_config.load(dict(dict(overlap_update=True, num_steps=6, checkpoint_every=3),
                             **fields))


def test_iterations_right_after_a_checkpoint_do_not_overlap():
  assert [overlap_update.overlaps(i, _rl()) for i in range(7)] == [
      False, True, True, False, True, True, False]
  assert not any(overlap_update.overlaps(i, _rl(overlap_update=False)) for i in range(7))
  assert all(overlap_update.overlaps(i, _rl(checkpoint_every=100)) for i in range(1, 6))
  # with async rewards at staleness 1 the horizon stops growing before each save:
  # iterations 2 and 5 have nothing new to launch
  async1 = _rl(async_rewards=True, async_staleness=1)
  assert [overlap_update.overlaps(i, async1) for i in range(7)] == [
      False, True, False, False, True, False, False]
  assert overlap_update.max_staleness(async1) == 2
  assert overlap_update.max_staleness(_rl()) == 1
  assert overlap_update.max_staleness(_rl(overlap_update=False, async_rewards=True)) == 1


def test_the_sampler_copy_outlives_the_updates_donation():
  state = {"w": jnp.arange(4.0), "b": jnp.ones(3)}
  merged = jnp.full((2,), 7.0)  # not the state's: e.g. LoRA's merged params
  copy = overlap_update.hand_over({"w": state["w"], "b": state["b"], "m": merged}, state)
  update = jax.jit(lambda s: jax.tree.map(lambda x: x + 1.0, s), donate_argnums=0)
  new = update(state)
  assert state["w"].is_deleted() and state["b"].is_deleted()  # donated
  np.testing.assert_array_equal(copy["w"], np.arange(4.0))
  np.testing.assert_array_equal(copy["b"], np.ones(3))
  np.testing.assert_array_equal(new["w"], np.arange(4.0) + 1.0)
  np.testing.assert_array_equal(copy["m"], np.full((2,), 7.0))
  assert overlap_update.tree_nbytes(copy) == 4 * (4 + 3 + 2)


def test_sampler_slot_hands_over_only_where_the_next_iteration_overlaps():
  rl = _rl()
  c = types.SimpleNamespace(rl=rl, policy_params=lambda state: state["params"])
  slot = overlap_update.SamplerSlot()
  state = {"params": {"w": jnp.ones((8,), jnp.float32)}, "opt": jnp.zeros(8)}
  assert slot.before_update(c, state, 0) == {"overlap/sampler_params_gib": 32 / 2**30}
  assert slot.take(1, in_flight=False) is None  # no update running: it waits instead
  slot.before_update(c, state, 0)
  held = slot.take(1, in_flight=True)
  assert held.version == 0 and held.params["w"] is not state["params"]["w"]
  assert slot.take(1, in_flight=True) is None  # taken once
  assert slot.before_update(c, state, 2) == {"overlap/sampler_params_gib": 0.0}  # 3: saved
  assert slot.take(3, in_flight=True) is None
  slot.before_update(c, state, 3)
  assert slot.take(5, in_flight=True) is None  # a copy of another version (rolled back)


def test_pipeline_launches_with_an_older_version():
  pipe = RolloutPipeline(staleness=0, num_steps=5, checkpoint_every=100)
  entry, metrics = pipe.next(2, lambda j: j, version=1)
  assert (entry.iteration, entry.policy_version, metrics["async/staleness"]) == (2, 1, 1)
  with pytest.raises(ValueError, match="policy version 3 at iteration 2"):
    pipe.next(2, lambda j: j, version=3)


def test_overlap_config_errors():
  with pytest.raises(ValueError, match="overlap_update needs rl.metrics_one_step_late=True"):
    _rl(metrics_one_step_late=False)
  with pytest.raises(ValueError, match="overlap_update must be a bool"):
    _rl(overlap_update="yes")
  c = grpo_arithmetic.get_config("tiny")
  c.rl.overlap_update = True
  c.filtering.enabled = True
  with pytest.raises(ConfigError, match="overlap_update needs filtering.enabled=False"):
    components.rl_sections(c)


def _stable(rows):
  return computed_rows(rows, VOLATILE)


def _same_params(a, b):
  same = jax.tree.map(lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)), a, b)
  return all(jax.tree.leaves(same))


@pytest.fixture(scope="module")
def sync_run(tokenizer_path, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("sync"))
  out = trainer.train(digit_config(tokenizer_path), workdir)
  return read_metrics(workdir), out["state"].params


def test_with_a_checkpoint_every_step_nothing_overlaps_and_the_run_is_synchronous(
    tokenizer_path, tmp_path, sync_run):
  sync_rows, sync_params = sync_run
  out = trainer.train(digit_config(tokenizer_path, overlap_update=True, checkpoint_every=1),
                      str(tmp_path))
  rows = read_metrics(str(tmp_path))
  assert _stable(rows) == _stable(sync_rows)
  assert [m["async/staleness"] for m in rows] == [0, 0, 0, 0]
  assert [m["overlap/sampler_params_gib"] for m in rows] == [0, 0, 0, 0]
  assert _same_params(out["state"].params, sync_params)


def test_overlap_trains_one_version_stale_and_resumes_exactly(tokenizer_path, tmp_path,
                                                             sync_run):
  config = digit_config(tokenizer_path, overlap_update=True)
  straight = trainer.train(config, str(tmp_path / "straight"))
  a = read_metrics(str(tmp_path / "straight"))
  # checkpoint_every=2: batches 1 and 3 wait for the update (drained), 2 and 4 overlap it
  assert [m["async/staleness"] for m in a] == [0, 1, 0, 1]
  assert [m["overlap/sampler_params_gib"] > 0 for m in a] == [True, False, True, False]
  assert all(m["time/handover_s"] >= 0 for m in a)
  sync_rows, _ = sync_run
  assert _stable(a)[0] == _stable(sync_rows)[0]  # the first batch is the synchronous one
  assert a[1]["loss"] != sync_rows[1]["loss"]  # the second was sampled one update earlier
  config.rl.num_steps = 2  # "crash" after step 2, then rerun the same command
  trainer.train(config, str(tmp_path / "resumed"))
  config.rl.num_steps = 4
  resumed = trainer.train(config, str(tmp_path / "resumed"))
  b = read_metrics(str(tmp_path / "resumed"))
  assert [m["step"] for m in b] == [1, 2, 3, 4]
  assert _stable(a) == _stable(b)
  assert [m["async/staleness"] for m in b] == [0, 1, 0, 1]
  assert _same_params(straight["state"].params, resumed["state"].params)


def test_stale_batches_get_the_off_policy_correction_and_gap(tokenizer_path, tmp_path):
  """With async rewards at staleness 1 the overlap adds one version (k = 2); TIS
  recomputes a stale batch's old log-probs with the params the update starts
  from, so its gap to the behaviour log-probs is the policy's drift, not rounding."""
  trainer.train(digit_config(tokenizer_path, overlap_update=True, async_rewards=True,
                        async_staleness=1, checkpoint_every=100, tis_cap=2.0),
                str(tmp_path))
  rows = read_metrics(str(tmp_path))
  assert [m["async/staleness"] for m in rows] == [0, 1, 2, 2]
  gaps = [m["offpolicy/logp_abs_diff_mean"] for m in rows]
  assert gaps[0] < 1e-4  # sampled by the policy that trains on it: f32 rounding only
  assert all(g > max(10 * gaps[0], 1e-4) for g in gaps[1:]), gaps
  assert all("offpolicy/tis_clip_frac" in m and np.isfinite(m["loss"]) for m in rows)


def _record_order(monkeypatch) -> list:
  """("generate", checksum of the params it samples with) per generation and
  ("await", step) per wait for a dispatched update that was still unfinished."""
  events = []
  generate, await_update = single_turn_source.generate, trainer._await_update

  def spy_generate(params, *args, **kwargs):
    events.append(("generate", sum(float(np.asarray(x, np.float64).sum())
                                   for x in jax.tree.leaves(params))))
    return generate(params, *args, **kwargs)

  def spy_await(step):
    if step.end is None:
      events.append(("await", step.done))
    return await_update(step)

  monkeypatch.setattr(single_turn_source, "generate", spy_generate)
  monkeypatch.setattr(trainer, "_await_update", spy_await)
  return events


def test_rollout_t_plus_1_samples_the_params_from_before_update_t(tokenizer_path, tmp_path,
                                                                 monkeypatch):
  """The synchronous order is generate, await1, generate, await2, ... (each rollout
  waits for the update before it); overlapped, rollouts 2 and 3 come first."""
  events = _record_order(monkeypatch)
  trainer.train(digit_config(tokenizer_path, overlap_update=True, num_steps=3,
                        checkpoint_every=100), str(tmp_path))
  order = [e[0] if e[0] == "generate" else f"await{e[1]}" for e in events]
  assert order == ["generate", "generate", "await1", "generate", "await2", "await3"]
  versions = [e[1] for e in events if e[0] == "generate"]
  assert versions[0] == versions[1] != versions[2]  # rollout 2: the initial policy again
