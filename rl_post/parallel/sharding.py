"""Logical-axis sharding: one rules table maps logical names to mesh axes.

Parameters carry logical axis names (`embed`, `mlp`, `heads`, `kv_heads`,
`head_dim`, `vocab`, `layers`; LoRA adapters add `lora_rank`); activations
use `batch` and `length`, KV caches `cache_batch`, `cache_length`,
`cache_kv_heads`, `head_dim`. The rules table, a sequence of
`(logical_name, mesh_axis | tuple | None)`, lives in the config and is the
only place that decides how anything is split.

Activations: the model pins its residual stream to the `batch` rule with
`constrain_batch` (a `with_sharding_constraint` against the mesh in context,
`jax.set_mesh`, which `training.run.setup_run` sets together with the run's
rules via `use_mesh`). Without it the partitioner follows the parameters and,
with `fsdp > 1`, keeps every layer's saved activations split over `embed`
for the whole global batch instead of over `batch` (docs/scale.md).
"""

import contextlib
import math
from typing import Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec

from rl_post.errors import ConfigError

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
    ("lora_rank", None),  # LoRA adapters' rank r (rl_post/models/lora.py): small, replicated
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
    if dim % size:  # the mesh (or the rules) of the config do not fit the model
      names = _as_tuple(axes)
      raise ConfigError(f"mesh.{names[0]}", mesh.shape[names[0]],
                        f"{path}: dimension {dim} is not divisible by mesh axes {axes} "
                        f"(size {size}); change the mesh or the sharding rules")


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


_activation_rules = [DEFAULT_RULES]  # the run's rules table; set with the mesh by `use_mesh`


def set_activation_rules(rules):
  """Sets the rules `constrain_batch` reads; returns the previous table."""
  previous = _activation_rules[0]
  _activation_rules[0] = tuple(tuple(r) for r in rules)
  return previous


@contextlib.contextmanager
def use_mesh(mesh, rules):
  """`jax.set_mesh(mesh)` and the activation rules, restored on exit."""
  previous = set_activation_rules(rules)
  try:
    with jax.set_mesh(mesh):
      yield mesh
  finally:
    set_activation_rules(previous)


def batch_axes(mesh_axis_names: Sequence[str], rules=None) -> tuple:
  """Mesh axes of the `batch` rule that exist in the mesh (default: the activation rules)."""
  table = {}
  for name, axes in (rules or _activation_rules[0]):
    table.setdefault(name, _as_tuple(axes))
  return tuple(a for a in table.get("batch", ()) if a in mesh_axis_names)


def constrain_batch(x):
  """`x` [batch, ...] with its batch axis split per the `batch` rule, the rest left free.

  A no-op when no mesh is in context (`jax.set_mesh`), inside `shard_map`,
  or when the batch does not divide over the axes (e.g. a sampler's few
  prompts), so model code can call it unconditionally.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or any(t == jax.sharding.AxisType.Manual for t in mesh.axis_types):
    return x
  axes = batch_axes(mesh.axis_names)
  size = math.prod(mesh.shape[a] for a in axes)
  if size <= 1 or x.shape[0] % size:
    return x
  free = (PartitionSpec.UNCONSTRAINED,) * (x.ndim - 1)
  return jax.lax.with_sharding_constraint(
      x, PartitionSpec(axes if len(axes) > 1 else axes[0], *free))
