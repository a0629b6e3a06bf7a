"""Device meshes built from the config's `mesh` section."""

from typing import Mapping

import jax
import numpy as np

from rl_post.errors import ConfigError

MESH_AXES = ("data", "fsdp", "tensor", "context")


def resolve_mesh_shape(axis_sizes: Mapping[str, int], num_devices: int) -> dict[str, int]:
  """Fills one -1 entry so the product equals the device count.

  Raises:
    ValueError: naming the mesh field that is wrong.
  """
  unknown = sorted(set(axis_sizes) - set(MESH_AXES))
  if unknown:
    raise ValueError(f"mesh has unknown axes {unknown}; allowed {MESH_AXES}")
  sizes = {name: int(axis_sizes.get(name, 1)) for name in MESH_AXES}
  for name, size in sizes.items():
    if size == 0 or size < -1:
      raise ValueError(f"mesh.{name} must be a positive int or -1, got {size}")
  free = [name for name, size in sizes.items() if size == -1]
  if len(free) > 1:
    raise ValueError(f"at most one mesh axis may be -1, got {free}")
  fixed = int(np.prod([s for s in sizes.values() if s != -1]))
  if free:
    if num_devices % fixed:
      raise ConfigError("mesh", sizes, f"its axes do not divide the {num_devices} devices")
    sizes[free[0]] = num_devices // fixed
  elif fixed != num_devices:
    raise ConfigError("mesh", sizes, f"has {fixed} devices but {num_devices} are available")
  return sizes


def make_mesh(axis_sizes: Mapping[str, int], devices=None) -> jax.sharding.Mesh:
  """A ('data', 'fsdp', 'tensor', 'context') mesh over `devices` (default: all).

  `context` splits sequences (ring attention); parameters are never
  sharded over it.
  """
  devices = jax.devices() if devices is None else list(devices)
  sizes = resolve_mesh_shape(axis_sizes, len(devices))
  shape = tuple(sizes[name] for name in MESH_AXES)
  return jax.make_mesh(shape, MESH_AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)


def context_mesh(mesh: jax.sharding.Mesh):
  """`mesh` if it splits sequences over `context`, else None (no ring attention)."""
  return mesh if dict(zip(mesh.axis_names, mesh.devices.shape)).get("context", 1) > 1 else None
