"""Corrupt or non-finite checkpoints: detected, moved aside, never written."""

import gc
import os
import sys
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from rl_post.checkpoint import CheckpointManager, CorruptCheckpointError
from rl_post.checkpoint import integrity
from rl_post.training.faults import CORRUPTIONS, corrupt_step


def _state(seed):
  k1, k2 = jax.random.split(jax.random.key(seed))
  return {"w": jax.random.normal(k1, (256, 64)),  # random: stored uncompressed
          "b": jax.random.normal(k2, (64,), jnp.bfloat16),
          "step": jnp.array(seed, jnp.int32), "rng": jax.random.key(seed)}


def _abstract(state):
  replicated = NamedSharding(jax.make_mesh((1,), ("data",)), P())
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                      jax.eval_shape(lambda: state))


def _equal(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    if not np.array_equal(np.asarray(x), np.asarray(y)):
      return False
  return True


# Orbax reports the failed read once more from a background thread.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corrupt_newest_step_is_moved_aside_and_step_can_be_saved_again(tmp_path, how):
  events = []
  with CheckpointManager(tmp_path, on_event=lambda *a, **k: events.append((a, k))) as ckpt:
    ckpt.save(1, _state(1), extra={"at": 1})
    ckpt.save(2, _state(2), extra={"at": 2})
  corrupt_step(str(tmp_path / "2"), how)
  with CheckpointManager(tmp_path, on_event=lambda *a, **k: events.append((a, k))) as ckpt:
    with pytest.warns(UserWarning, match="falling back to step 1"):
      state, extra = ckpt.restore(_abstract(_state(1)), fallback=True)
    assert extra == {"at": 1} and _equal(state, _state(1))
    assert ckpt.all_steps() == [1]
    reason = "checksum" if how == "flip" else "unreadable"
    assert os.listdir(tmp_path / "corrupt") == [f"2-{reason}"]  # kept, not deleted
    assert ckpt.moved_aside_count() == 1
    assert events[0][0] == ("checkpoint_moved_aside", 2)
    assert ckpt.save(2, _state(2), extra={"at": 2})  # no StepAlreadyExistsError
  with CheckpointManager(tmp_path) as ckpt:
    state, extra = ckpt.restore(_abstract(_state(1)))
    assert extra == {"at": 2} and _equal(state, _state(2))


def _live_orbax_coroutines():
  # type(), not isinstance(): the latter reads __class__, which some modules' lazy
  # attributes answer with a deprecation warning
  return [o.cr_code.co_name for o in gc.get_objects()
          if type(o) is types.CoroutineType and "orbax" in o.cr_code.co_filename]


@pytest.mark.parametrize("fallback", [True, False])
def test_reads_abandoned_by_a_failed_restore_are_finalised_before_it_returns(
    tmp_path, monkeypatch, fallback):
  # A truncated data file fails orbax's restore part-way. Its suspended read coroutines must
  # not outlive restore(), or they report whenever the garbage collector next runs (in CI:
  # in whichever test came next); finalised inside restore(), they report nothing.
  unraisable = []
  monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
  for run in range(3):
    directory = tmp_path / str(run)
    with CheckpointManager(directory) as ckpt:
      ckpt.save(1, _state(1))
      ckpt.save(2, _state(2))
    corrupt_step(str(directory / "2"), "truncate")
    with CheckpointManager(directory) as ckpt, warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      if fallback:
        ckpt.restore(_abstract(_state(1)), fallback=True)
      else:  # the read-only path of checkpoint_eval: the caller handles the error
        with pytest.raises(CorruptCheckpointError, match="unreadable") as error:
          ckpt.restore(_abstract(_state(1)), fallback=False)
        assert "Encountered error while reading" in str(error.value)
      assert _live_orbax_coroutines() == [], run
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert unraisable == []


def test_flipped_bytes_without_fallback_raise_naming_the_leaf(tmp_path):
  with CheckpointManager(tmp_path) as ckpt:
    ckpt.save(1, _state(1))
  corrupt_step(str(tmp_path / "1"), "flip")
  with CheckpointManager(tmp_path) as ckpt:
    with pytest.raises(CorruptCheckpointError, match="fails its checksums .*'w'"):
      ckpt.restore(_abstract(_state(1)))
    assert ckpt.all_steps() == [1]  # without fallback nothing is moved


def test_nonfinite_state_is_never_saved(tmp_path):
  events = []
  bad = dict(_state(1), b=jnp.full((64,), jnp.nan, jnp.bfloat16))
  with CheckpointManager(tmp_path, on_event=lambda *a, **k: events.append(a)) as ckpt:
    with pytest.warns(UserWarning, match=r"not saving checkpoint step 1: non-finite .*'b'"):
      assert not ckpt.save(1, bad, force=True)
    inf = dict(_state(1), w=_state(1)["w"].at[3, 3].set(jnp.inf))
    with pytest.warns(UserWarning, match="non-finite"):
      assert not ckpt.save(2, inf)
    assert ckpt.refused_saves == 2 and ckpt.all_steps() == []
    assert [e[0] for e in events] == ["checkpoint_save_refused"] * 2
    assert ckpt.save(3, _state(3)) and ckpt.all_steps() == [3]


def test_checksums_do_not_depend_on_dtype_view_or_layout():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  sums = integrity.checksums({"x": x})
  assert integrity.mismatches({"x": np.asfortranarray(x)}, sums) == []
  y = x.copy()
  y[1, 2] = np.nextafter(y[1, 2], 100)  # one ulp
  assert integrity.mismatches({"x": y}, sums) == ["x"]
  assert integrity.mismatches({"x": x, "z": x}, sums) == ["z"]
  assert integrity.nonfinite_leaves({"i": np.array([1, 2]), "x": x}) == []
  assert integrity.nonfinite_leaves({"x": np.array([np.nan], np.float16)}) == ["x"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_every_step_corrupt_moves_all_aside_and_raises(tmp_path):
  with CheckpointManager(tmp_path) as ckpt:
    ckpt.save(1, _state(1))
    ckpt.save(2, _state(2))
  corrupt_step(str(tmp_path / "1"), "truncate")
  corrupt_step(str(tmp_path / "2"), "flip")
  with CheckpointManager(tmp_path) as ckpt:
    with pytest.warns(UserWarning) as record:
      with pytest.raises(CorruptCheckpointError, match="no readable checkpoint at or before"):
        ckpt.restore(_abstract(_state(1)), fallback=True)
    assert [str(w.message).rsplit("; ", 1)[-1] for w in record] == [
        "falling back to step 1", "falling back to nothing"]
    assert ckpt.all_steps() == [] and ckpt.latest_step() is None
  assert sorted(os.listdir(tmp_path / "corrupt")) == ["1-unreadable", "2-checksum"]
