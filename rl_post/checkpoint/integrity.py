"""Integrity of saved train state: per-leaf CRC32 checksums and finiteness.

A checkpoint step stores `{key path: {"crc32", "shape", "dtype"}}` for every
array leaf of the stored (key-data) tree in its `meta` item; restore
recomputes them from the arrays it read and refuses a step whose bytes
differ (bit rot, a partly overwritten data file), which orbax alone reads
back without complaint. The checksum is over the whole array in C order,
so it does not depend on how the array was sharded when saved or restored.
"""

from __future__ import annotations

import zlib
from typing import Any

import jax
import numpy as np


def path_str(path: tuple) -> str:
  """A pytree key path as "a/b/0" (the names orbax also uses)."""

  def one(entry):
    for attr in ("name", "key", "idx"):  # GetAttrKey, DictKey, SequenceKey
      if hasattr(entry, attr):
        return str(getattr(entry, attr))
    return str(entry)

  return "/".join(one(e) for e in path) or "<root>"


def host_leaves(tree: Any) -> dict[str, np.ndarray]:
  """{key path: host numpy array} of a tree of arrays (one device_get).

  Leaves sharded over other processes too (multi-host) are left out: no
  single process can read them whole, so they go unchecked.
  """
  flat = [(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
          if not (isinstance(leaf, jax.Array) and not leaf.is_fully_addressable)]
  values = jax.device_get([leaf for _, leaf in flat])
  return {path_str(path): np.asarray(v) for (path, _), v in zip(flat, values)}


def checksums(leaves: dict[str, np.ndarray]) -> dict[str, dict]:
  """{key path: {"crc32": int, "shape": [...], "dtype": str}} (JSON-ready)."""
  return {name: {"crc32": zlib.crc32(np.ascontiguousarray(x).tobytes()),
                 "shape": list(x.shape), "dtype": str(x.dtype)}
          for name, x in leaves.items()}


def mismatches(leaves: dict[str, np.ndarray], stored: dict[str, dict]) -> list[str]:
  """Key paths whose array differs from its stored checksum (or is missing)."""
  actual = checksums(leaves)
  bad = [name for name, want in stored.items() if actual.get(name) != want]
  bad += [name for name in actual if name not in stored]
  return sorted(bad)


def nonfinite_leaves(leaves: dict[str, np.ndarray]) -> list[str]:
  """Key paths of floating-point leaves holding a NaN or an infinity."""
  bad = []
  for name, x in leaves.items():
    if np.issubdtype(x.dtype, np.inexact) or x.dtype.name == "bfloat16":
      if not np.isfinite(x.astype(np.float32) if x.dtype.name == "bfloat16" else x).all():
        bad.append(name)
  return bad
