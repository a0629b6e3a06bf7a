"""Per-process batches: each host builds only its rows, JAX assembles the global array.

With the batch axis split over ("data", "fsdp") and `jax.make_mesh` placing
each host's devices next to each other, every process owns one contiguous
block of rows of a global batch. `local_rows` finds that block from the
sharding itself (no assumption about process order), a process builds just
those rows (tasks, prompts, rewards), and `global_batch` turns the local
blocks into one global `jax.Array` with
`jax.make_array_from_process_local_data`. With one process this is a plain
`device_put`.
"""

from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils


def local_rows(batch_sharding: jax.sharding.Sharding, global_rows: int) -> slice:
  """The rows [start, stop) of a [global_rows, ...] batch this process holds.

  Raises:
    ValueError: when the process's rows are not one contiguous block (a mesh
      whose batch axes interleave hosts) or do not divide evenly.
  """
  index_map = batch_sharding.addressable_devices_indices_map((global_rows,))
  spans = sorted({(idx[0].start or 0, global_rows if idx[0].stop is None else idx[0].stop)
                  for idx in index_map.values()})
  start, stop = spans[0][0], spans[0][0]
  for lo, hi in spans:
    if lo > stop:
      raise ValueError(f"process {jax.process_index()} holds rows {spans} of the batch, "
                       "not one contiguous block; order the mesh so each host's devices "
                       "are adjacent on the batch axes (jax.make_mesh does)")
    stop = max(stop, hi)
  return slice(start, stop)


def global_batch(local_tree: Any, batch_shardings: Any, global_rows: int) -> Any:
  """Global arrays from each process's rows (`local_rows`) of every leaf.

  Args:
    local_tree: pytree of numpy arrays [local_rows, ...], this process's block.
    batch_shardings: one sharding for all leaves, or a matching pytree.
    global_rows: the batch size summed over processes.
  Raises:
    ValueError: when a leaf's row count is not this process's block size.
  """
  if isinstance(batch_shardings, jax.sharding.Sharding):
    batch_shardings = jax.tree.map(lambda _: batch_shardings, local_tree)

  def one(path, x, sh):
    x = np.asarray(x)
    rows = local_rows(sh, global_rows)
    if x.shape[0] != rows.stop - rows.start:
      raise ValueError(f"{jax.tree_util.keystr(path)}: this process holds rows "
                       f"[{rows.start}, {rows.stop}) of {global_rows}, got {x.shape[0]} rows")
    return jax.make_array_from_process_local_data(sh, x, (global_rows,) + x.shape[1:])

  return jax.tree_util.tree_map_with_path(one, local_tree, batch_shardings)


def build_local(make_rows, items: Sequence, sharding_for: Callable[[int], jax.sharding.Sharding]):
  """Global arrays of `make_rows(items)` where each process builds only its rows.

  Args:
    make_rows: items -> pytree of numpy arrays with one row per item (e.g.
      tasks -> (prompts_BxP, prompt_lens_B)).
    items: the whole batch's items (the same on every process).
    sharding_for: ndim -> the batch sharding of a leaf with that many dims.
  """
  n = len(items)
  local = make_rows(items[local_rows(sharding_for(1), n)])
  return global_batch(local, jax.tree.map(lambda x: sharding_for(np.ndim(x)), local), n)


def put_batch(tree: Any, batch_shardings: Any) -> Any:
  """A host-global numpy batch (the same on every process) as global arrays.

  Each process contributes only its rows, so this is the multi-host form of
  `jax.device_put(tree, batch_shardings)` for batches every host can build.
  """
  if jax.process_count() == 1:
    return jax.device_put(tree, batch_shardings)
  if isinstance(batch_shardings, jax.sharding.Sharding):
    batch_shardings = jax.tree.map(lambda _: batch_shardings, tree)
  leaves = jax.tree.leaves(tree)
  global_rows = int(np.shape(leaves[0])[0])
  local = jax.tree.map(lambda x, sh: np.asarray(x)[local_rows(sh, global_rows)],
                       tree, batch_shardings)
  return global_batch(local, batch_shardings, global_rows)


def fetch(tree: Any) -> Any:
  """Every leaf's whole value as numpy on every process (metrics, rollouts, small tensors).

  A global `jax.Array` gives its global value (gathered only when this
  process does not already hold all of it); with several processes, a
  numpy leaf is this process's block, and the blocks are concatenated in
  process order.
  """
  if jax.process_count() == 1:
    return jax.device_get(tree)

  def one(x):
    if isinstance(x, jax.Array) and (x.is_fully_addressable or x.is_fully_replicated):
      return np.asarray(jax.device_get(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))

  return jax.tree.map(one, tree)
