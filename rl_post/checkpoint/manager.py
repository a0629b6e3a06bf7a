"""Checkpointing of the train state (any JAX pytree) plus a small JSON dict.

A thin wrapper over `orbax.checkpoint.CheckpointManager`. Each step directory
holds three items:

  state/  the pytree (StandardSave); typed PRNG keys stored as their raw
          `jax.random.key_data`, since a key dtype is not a storable dtype
  extra/  caller's JSON dict (e.g. curriculum state), in extra/metadata (`extra_path`)
  meta/   our bookkeeping: which leaves were typed keys, and their impl, and
          a CRC32 per array leaf (`rl_post.checkpoint.integrity`)

`restore` takes an abstract tree (`jax.ShapeDtypeStruct`s with shardings) so
every array is read straight into its final sharding, checks the stored tree
against it first (naming the mismatching key path), verifies the checksums,
and can fall back past a corrupt latest step: with `fallback=True` an
unreadable or corrupt step is moved aside to `<directory>/corrupt/<step>-<reason>`
(kept for inspection, never deleted), so the run can save that step again.
`save` refuses (warns, counts, returns False) a state holding NaN or inf.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from rl_post.checkpoint import integrity
from rl_post.checkpoint.failed_reads import OrbaxReadLeftovers, release_failed_read

_STATE, _EXTRA, _META = "state", "extra", "meta"
CORRUPT_DIRNAME = "corrupt"


class CorruptCheckpointError(RuntimeError):
  """A checkpoint step exists on disk but cannot be read back.

  Attributes:
    reason: short slug used in the moved-aside directory name
      ("unreadable" or "checksum").
  """

  def __init__(self, message: str, reason: str = "unreadable"):
    super().__init__(message)
    self.reason = reason


class CheckpointMismatchError(ValueError):
  """A readable checkpoint step holds a different tree than the one asked for:
  another model size, optimizer or algorithm (keys or shapes differ)."""


_path_str = integrity.path_str


def _is_prng_key(dtype: Any) -> bool:
  return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _stored_state(state: Any) -> tuple[Any, dict[str, str]]:
  """Replaces typed PRNG key leaves by their uint32 data.

  Returns:
    (storable pytree, {key path: PRNG impl name} for the replaced leaves).
  """
  key_impls: dict[str, str] = {}

  def convert(path, leaf):
    if isinstance(leaf, jax.Array) and _is_prng_key(leaf.dtype):
      key_impls[_path_str(path)] = str(jax.random.key_impl(leaf))
      return jax.random.key_data(leaf)
    return leaf

  return jax.tree_util.tree_map_with_path(convert, state), key_impls


def _abstract_for_storage(abstract_state: Any) -> Any:
  """Validates the abstract tree; maps typed-key leaves to their data shape.

  Concrete `jax.Array` leaves are accepted and stand for their own shape,
  dtype and sharding.
  """

  def convert(path, leaf):
    name = _path_str(path)
    if isinstance(leaf, jax.Array):
      leaf = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
    if not isinstance(leaf, jax.ShapeDtypeStruct):
      raise ValueError(
          f"abstract_state leaf {name!r} must be a jax.ShapeDtypeStruct (from "
          f"jax.eval_shape) or a jax.Array, got {type(leaf).__name__}")
    if leaf.sharding is None:
      raise ValueError(
          f"abstract_state leaf {name!r} has no sharding; attach one, e.g. "
          "jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=...)")
    if _is_prng_key(leaf.dtype):
      data = jax.eval_shape(jax.random.key_data, leaf)
      # Trailing key-data dims are left out of a NamedSharding's spec, so
      # they are replicated; the key's own dims keep their sharding.
      return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=leaf.sharding)
    return leaf

  return jax.tree_util.tree_map_with_path(convert, abstract_state)


def _flatten_metadata(tree: Any, prefix: tuple[str, ...] = ()) -> dict[str, tuple]:
  """{key path: shape} of orbax's stored-tree metadata (nested dicts/lists)."""
  if tree is None:
    return {}
  if isinstance(tree, dict):
    items = tree.items()
  elif isinstance(tree, (list, tuple)):
    items = enumerate(tree)
  else:
    return {"/".join(prefix) or "<root>": tuple(getattr(tree, "shape", ()))}
  out = {}
  for k, sub in items:
    out.update(_flatten_metadata(sub, prefix + (str(k),)))
  return out


def _check_structure(stored: dict[str, tuple], abstract: Any, where: str) -> None:
  """Raises CheckpointMismatchError naming the first key path whose presence/shape differ."""
  wanted = {
      _path_str(path): tuple(leaf.shape)
      for path, leaf in jax.tree_util.tree_flatten_with_path(abstract)[0]
  }
  for name, shape in wanted.items():
    if name not in stored:
      raise CheckpointMismatchError(
          f"{where} does not match abstract_state: key {name!r} (shape "
          f"{shape}) is not in the checkpoint; stored keys include "
          f"{sorted(stored)[:8]}")
    if stored[name] != shape:
      raise CheckpointMismatchError(
          f"{where} does not match abstract_state at key {name!r}: checkpoint "
          f"shape {stored[name]}, abstract_state shape {shape}")
  extra_keys = sorted(set(stored) - set(wanted))
  if extra_keys:
    raise CheckpointMismatchError(
        f"{where} does not match abstract_state: checkpoint has keys missing "
        f"from abstract_state: {extra_keys[:8]}")


def _check_step(step: Any) -> int:
  if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
    raise ValueError(f"step must be an int, got {step!r}")
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  return int(step)


def _verify(stored_state: Any, meta: dict, where: str) -> None:
  """Raises CorruptCheckpointError if the arrays differ from their checksums.

  Steps written before checksums existed (no "checksums" in meta) pass.
  """
  stored = meta.get("checksums")
  if stored is None:
    return
  bad = integrity.mismatches(integrity.host_leaves(stored_state), stored)
  if bad:
    raise CorruptCheckpointError(
        f"{where} fails its checksums (array data changed since it was saved) "
        f"in {len(bad)} leaves, e.g. {bad[:3]}", reason="checksum")


class CheckpointManager:
  """Saves and restores (train state, extra JSON dict) by step.

  Usage:
    ckpt = CheckpointManager(workdir + "/checkpoints", max_to_keep=3)
    if ckpt.latest_step() is not None:
      state, extra = ckpt.restore(abstract_state, fallback=True)
    ...
    ckpt.save(step, state, extra={"curriculum": mixture.state_dict()})
    ckpt.close()

  Saving is asynchronous (device arrays are copied to host before `save`
  returns, so the state may be donated right after); `wait_until_finished`
  and `close` block until the write is committed.
  """

  def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 3,
               save_interval_steps: int = 1, on_event=None):
    """Args:
      directory: where step directories live; created if missing.
      max_to_keep: keep only the newest N steps (None keeps all).
      save_interval_steps: `save` writes only when step % N == 0 unless forced.
      on_event: optional `(kind, step, **info)` callback for handled faults:
        "checkpoint_moved_aside" and "checkpoint_save_refused".

    Attributes:
      refused_saves: saves refused because the state was not finite.
      moved_aside: paths of steps moved to `<directory>/corrupt/`.
    """
    if max_to_keep is not None and (
        not isinstance(max_to_keep, int) or max_to_keep < 1):
      raise ValueError(f"max_to_keep must be an int >= 1 or None, got {max_to_keep!r}")
    if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
      raise ValueError(
          f"save_interval_steps must be an int >= 1, got {save_interval_steps!r}")
    self.directory = os.path.abspath(os.fspath(directory))
    self._on_event = on_event
    self.refused_saves = 0
    self.moved_aside: list[str] = []
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
        create=True)
    self._mgr = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={
            _STATE: ocp.StandardCheckpointHandler(),
            _EXTRA: ocp.JsonCheckpointHandler(),
            _META: ocp.JsonCheckpointHandler(),
        })

  def save(self, step: int, state: Any, *, extra: dict | None = None,
           force: bool = False) -> bool:
    """Saves `state` and `extra` at `step` (if due under save_interval_steps).

    Args:
      step: training step, int >= 0; must not already be saved.
      state: pytree of arrays (e.g. a flax.struct TrainState); typed PRNG key
        leaves are supported.
      extra: small JSON-serialisable dict, returned by `restore` (JSON turns
        tuples into lists and dict keys into strings).
      force: save even if `step` is not on the save interval.

    Returns:
      Whether a checkpoint was started for this step.
    """
    step = _check_step(step)
    extra = {} if extra is None else extra
    if not isinstance(extra, dict):
      raise ValueError(f"extra must be a dict or None, got {type(extra).__name__}")
    try:
      json.dumps(extra, allow_nan=False)
    except (TypeError, ValueError) as e:
      raise ValueError(f"extra must be JSON-serialisable: {e}") from e
    if not (force or self._mgr.should_save(step)):
      return False
    stored, key_impls = _stored_state(state)
    leaves = integrity.host_leaves(stored)
    bad = integrity.nonfinite_leaves(leaves)
    if bad:
      self.refused_saves += 1
      warnings.warn(f"not saving checkpoint step {step}: non-finite values in "
                    f"{len(bad)} leaves, e.g. {bad[:3]}", stacklevel=2)
      self._event("checkpoint_save_refused", step, leaves=bad[:8])
      return False
    meta = {"key_impls": key_impls, "checksums": integrity.checksums(leaves)}
    return self._mgr.save(
        step,
        args=ocp.args.Composite(**{
            _STATE: ocp.args.StandardSave(stored),
            _EXTRA: ocp.args.JsonSave(extra),
            _META: ocp.args.JsonSave(meta),
        }),
        force=True)

  def _event(self, kind: str, step: int, **info) -> None:
    if self._on_event is not None:
      self._on_event(kind, step, **info)

  def all_steps(self) -> list[int]:
    """Saved steps, ascending (committed ones; includes unreadable ones)."""
    return sorted(self._mgr.all_steps())

  def latest_step(self) -> int | None:
    """The newest saved step, or None if there is none."""
    return self._mgr.latest_step()

  def extra_path(self, step: int) -> str:
    """The file holding the extra dict saved with `step` (Orbax's JSON item), for
    messages about what it holds."""
    return os.path.join(self.directory, str(step), _EXTRA, "metadata")

  def read_extra(self, step: int | None = None) -> dict | None:
    """The extra dict saved with `step` (default: latest) without its state, or None
    when there is no such step or it cannot be read (nothing is moved aside)."""
    step = self.latest_step() if step is None else step
    if step is None:
      return None
    try:
      restored = self._mgr.restore(step, args=ocp.args.Composite(
          **{_EXTRA: ocp.args.JsonRestore()}))
    except Exception:  # Orbax/tensorstore raise many kinds on bad files; restore() reports
      return None
    return dict(restored[_EXTRA] or {})

  def restore(self, abstract_state: Any, step: int | None = None, *,
              fallback: bool = False) -> tuple[Any, dict]:
    """Restores the state at `step` (default: latest) into `abstract_state`.

    Args:
      abstract_state: the state's pytree with `jax.ShapeDtypeStruct` leaves
        carrying `.sharding` (e.g. `jax.eval_shape(init, rng)` plus
        shardings); typed PRNG key leaves come back as typed keys.
      step: which step; None for the latest.
      fallback: if the step is unreadable (partial or corrupt files) or
        fails its checksums, warn, move it aside to
        `<directory>/corrupt/<step>-<reason>` and try the next older step
        instead of raising.

    Returns:
      (state, extra) with the structure of `abstract_state` and the saved
      extra dict.

    Raises:
      FileNotFoundError: no checkpoint (or no such step) in the directory.
      CheckpointMismatchError: (a ValueError) the stored tree's keys or
        shapes differ from abstract_state.
      CorruptCheckpointError: the step cannot be read (and no fallback
        succeeded).
    """
    # Re-read the step list from disk: a save's max_to_keep clean-up may have
    # removed steps that orbax still lists.
    self._mgr.wait_until_finished()
    self._mgr.reload()
    steps = self.all_steps()
    if not steps:
      raise FileNotFoundError(f"no checkpoints in {self.directory}")
    if step is None:
      step = steps[-1]
    step = _check_step(step)
    if step not in steps:
      raise FileNotFoundError(
          f"no checkpoint for step {step} in {self.directory}; available: {steps}")
    abstract_stored = _abstract_for_storage(abstract_state)
    candidates = [s for s in reversed(steps) if s <= step]
    if not fallback:
      candidates = candidates[:1]
    errors = []
    for i, s in enumerate(candidates):
      try:
        return self._restore_step(s, abstract_state, abstract_stored)
      except CorruptCheckpointError as e:
        if not fallback:
          raise
        errors.append(str(e))
        aside = self._move_aside(s, e.reason)
        where = f"step {candidates[i + 1]}" if i + 1 < len(candidates) else "nothing"
        warnings.warn(f"{e}; moved it to {aside}; falling back to {where}",
                      stacklevel=2)
    raise CorruptCheckpointError(
        f"no readable checkpoint at or before step {step} in "
        f"{self.directory}:\n" + "\n".join(errors))

  def _restore_step(self, step: int, abstract_state: Any,
                    abstract_stored: Any) -> tuple[Any, dict]:
    where = f"checkpoint step {step} in {self.directory}"
    try:
      metadata = self._mgr.item_metadata(step)[_STATE]
      stored_shapes = _flatten_metadata(getattr(metadata, "tree", metadata))
    except Exception as e:  # Orbax/tensorstore raise many kinds on bad files.
      raise CorruptCheckpointError(
          f"{where} is unreadable (partial or corrupt): {str(e)[:300]}") from e
    if not stored_shapes:  # e.g. state/_METADATA deleted: orbax reads an empty tree
      raise CorruptCheckpointError(f"{where} is unreadable (partial or corrupt): its state "
                                   "item lists no arrays")
    _check_structure(stored_shapes, abstract_stored, where)
    with OrbaxReadLeftovers():
      try:
        restored = self._mgr.restore(
            step,
            args=ocp.args.Composite(**{
                _STATE: ocp.args.StandardRestore(abstract_stored),
                _EXTRA: ocp.args.JsonRestore(),
                _META: ocp.args.JsonRestore(),
            }))
      except Exception as e:
        release_failed_read(e)
        raise CorruptCheckpointError(
            f"{where} is unreadable (partial or corrupt): {str(e)[:300]}") from e
    key_impls = (restored[_META] or {}).get("key_impls", {})

    def to_key(path, abstract_leaf, leaf):
      name = _path_str(path)
      if not _is_prng_key(abstract_leaf.dtype):
        return leaf
      if name not in key_impls:
        raise CheckpointMismatchError(
            f"{where}: abstract_state key {name!r} is a PRNG key but the "
            "checkpoint stored a plain array there")
      key = jax.random.wrap_key_data(leaf, impl=key_impls[name])
      if key.dtype != abstract_leaf.dtype:
        raise CheckpointMismatchError(
            f"{where}: PRNG key {name!r} was saved with impl "
            f"{key_impls[name]!r} ({key.dtype}), abstract_state wants "
            f"{abstract_leaf.dtype}")
      return key

    _verify(restored[_STATE], restored[_META] or {}, where)
    state = jax.tree_util.tree_map_with_path(
        to_key, abstract_state, restored[_STATE])
    return state, dict(restored[_EXTRA] or {})

  def _move_aside(self, step: int, reason: str) -> str:
    """Moves step dir to corrupt/<step>-<reason>[-n]; orbax forgets the step."""
    self._mgr.wait_until_finished()
    src = os.path.join(self.directory, str(step))
    if not os.path.isdir(src):  # already gone; nothing to keep
      self._mgr.reload()
      return "<already removed>"
    root = os.path.join(self.directory, CORRUPT_DIRNAME)
    os.makedirs(root, exist_ok=True)
    dst = os.path.join(root, f"{step}-{reason}")
    n = 1
    while os.path.exists(dst):
      n += 1
      dst = os.path.join(root, f"{step}-{reason}-{n}")
    shutil.move(src, dst)
    self._mgr.reload()
    self.moved_aside.append(dst)
    self._event("checkpoint_moved_aside", step, reason=reason, path=dst)
    return dst

  def moved_aside_count(self) -> int:
    """Steps ever moved to `<directory>/corrupt/` (by any run on this dir)."""
    root = os.path.join(self.directory, CORRUPT_DIRNAME)
    return len(os.listdir(root)) if os.path.isdir(root) else 0

  def wait_until_finished(self) -> None:
    """Blocks until any in-flight asynchronous save is committed."""
    self._mgr.wait_until_finished()

  def close(self) -> None:
    """Finishes in-flight saves and releases resources."""
    self._mgr.wait_until_finished()
    self._mgr.close()

  def __enter__(self) -> CheckpointManager:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
