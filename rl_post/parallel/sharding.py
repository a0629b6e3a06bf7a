"""Logical-axis sharding: one rules table maps logical names to mesh axes.

Parameters carry logical axis names (`embed`, `mlp`, `heads`, `kv_heads`,
`head_dim`, `vocab`, `layers`); activations use `batch` and `length`, KV
caches `cache_batch`, `cache_length`, `cache_kv_heads`, `head_dim`. The
rules table, a sequence of `(logical_name, mesh_axis | tuple | None)`, lives
in the config and is the only place that decides how anything is split.
"""

from typing import Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec

DEFAULT_RULES = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("layers", None),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("cache_batch", ("data", "fsdp")),
    ("cache_length", None),
    ("cache_kv_heads", "tensor"),
)


def _as_tuple(mesh_axes):
  if mesh_axes is None:
    return ()
  return (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes)


def validate_rules(rules, mesh_axis_names: Sequence[str]):
  """Checks every rule names a known mesh axis; returns rules as a dict."""
  table = {}
  for rule in rules:
    if len(rule) != 2 or not isinstance(rule[0], str):
      raise ValueError(f"sharding rule must be (logical_name, mesh_axes), got {rule!r}")
    name, mesh_axes = rule
    for axis in _as_tuple(mesh_axes):
      if axis not in mesh_axis_names:
        raise ValueError(f"sharding rule for {name!r} names mesh axis {axis!r}; "
                         f"mesh axes are {tuple(mesh_axis_names)}")
    table.setdefault(name, _as_tuple(mesh_axes))
  return table


def logical_to_spec(logical_axes: Sequence[str | None], rules,
                    mesh_axis_names: Sequence[str]) -> PartitionSpec:
  """PartitionSpec for one array; a mesh axis is used at most once."""
  table = validate_rules(rules, mesh_axis_names)
  used, spec = set(), []
  for name in logical_axes:
    if name is not None and name not in table:
      raise ValueError(f"logical axis {name!r} has no sharding rule; add it to the rules")
    axes = tuple(a for a in table.get(name, ()) if a not in used)
    used.update(axes)
    spec.append(None if not axes else axes[0] if len(axes) == 1 else axes)
  return PartitionSpec(*spec)


def _check_divisible(path, shape, spec: PartitionSpec, mesh):
  for dim, axes in zip(shape, spec):
    size = 1
    for axis in _as_tuple(axes):
      size *= mesh.shape[axis]
    if dim % size:
      raise ValueError(f"{path}: dimension {dim} is not divisible by mesh axes "
                       f"{axes} (size {size}); change the mesh or the sharding rules")


def tree_shardings(logical_tree, abstract_tree, mesh, rules):
  """NamedShardings for a tree of arrays given a matching tree of axis names."""
  is_axes = lambda x: isinstance(x, tuple) and all(isinstance(a, (str, type(None))) for a in x)

  def one(path, axes, abstract):
    spec = logical_to_spec(axes, rules, mesh.axis_names)
    _check_divisible(jax.tree_util.keystr(path), abstract.shape, spec, mesh)
    return NamedSharding(mesh, spec)

  return jax.tree_util.tree_map_with_path(one, logical_tree, abstract_tree, is_leaf=is_axes)


def batch_sharding(mesh, rules, ndim: int) -> NamedSharding:
  """Sharding of a [batch, ...] array: batch split, the rest replicated."""
  spec = logical_to_spec(("batch",) + (None,) * (ndim - 1), rules, mesh.axis_names)
  return NamedSharding(mesh, spec)


def replicated(mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def shard_batch(tree, mesh, rules):
  """device_put every [batch, ...] array of `tree` split along its batch axis."""
  return jax.tree.map(lambda x: jax.device_put(x, batch_sharding(mesh, rules, x.ndim)), tree)
