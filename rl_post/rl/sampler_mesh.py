"""The sampler on devices of its own (`rl.sampler_devices`): a trainer mesh and a
sampler mesh over disjoint devices of one process, the policy handed over between them.

  c.rl.sampler_devices = 4   # of 8 devices: the trainer mesh on the first 4, the sampler's
                             # on the last 4; 0 (the default): one mesh for both

Both meshes lay out the `mesh` section, each resolving its -1 axis against its
own devices (data=-1 over 4 + 4 devices: data=4 on each), and both take their
shardings from the one rules table (`sharding_rules`). One round, as data:

  policy params (trainer mesh)
    --hand_over: jax.device_put with the sampler's param shardings (the resharding)-->
  the sampler's params; generation on the sampler mesh, with that mesh and the
    activation rules in context (its programs compile for the sampler's shardings)
    -> tokens/logp/mask [N, T] on the sampler (the masters' log-probs of the
       sampled tokens too, when the trainer recomputes them: `rl.recomputes_logp`)
  --back: jax.device_put to the trainer's batch sharding-->
  reference log-probs, critic values, rewards and the update, on the trainer mesh

With `rl.overlap_update` the hand-over is the `overlap_update.SamplerSlot`'s copy,
made before update t is dispatched: rollout t + 1 then generates on the sampler's
devices while update t runs on the trainer's. Without it each rollout's hand-over
is made when the rollout starts, after the update it follows (synchronous, on
another device set). Each step logs the bytes handed over and the seconds the
transfers took (`overlap/handover_gib`, `overlap/handover_s`); a hand-over moves
the policy's full params (with LoRA the merged ones; with `rl.rollout_precision`
the float masters, whose low-precision copy is made on the sampler mesh).
Held-out evaluation stays on the trainer mesh.

Limits: one process (a multi-host run keeps one mesh), no context parallelism
(`mesh.context` = 1), and rollout sources that generate on the sampler mesh
(`RolloutSource.runs_on_sampler_mesh`: single-turn rounds; episodes are
refused). With `rl.sampler_devices = 0` nothing here moves or changes
anything: `place` and `back` return their input.
"""

import contextlib
import time
from typing import Optional, Sequence

import jax

from rl_post.errors import ConfigError, one_line
from rl_post.parallel import distributed
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rl import overlap_update
from rl_post.training import state as state_lib

FIELD = "rl.sampler_devices"


def check_single_process(num_sampler_devices: int, distributed_config) -> None:
  """Refuses the split in a multi-host run, before any JAX backend starts.

  Raises:
    ConfigError: naming rl.sampler_devices when the `distributed` section
      (`DistributedConfig`) starts several processes.
  """
  if num_sampler_devices and distributed.resolve(distributed_config) is not None:
    raise ConfigError(FIELD, num_sampler_devices, "splits one process's devices; a multi-host "
                      "run (distributed.mode != 'off') keeps one mesh: set it to 0")


def split_devices(num_sampler_devices: int, devices: Sequence, mesh_axes,
                  process_count: int = 1) -> tuple[list, list]:
  """(trainer devices, sampler devices): the last `num_sampler_devices` of `devices`
  for the sampler, the rest for the trainer; each must lay out `mesh_axes` (the
  `mesh` section, its -1 axis resolved against that mesh's own devices).

  Raises:
    ConfigError: naming rl.sampler_devices when it leaves no trainer device, a
      mesh cannot lay out the section, the section splits sequences (context
      parallelism), or the process is one of several.
  """
  n, total = num_sampler_devices, len(devices)
  if process_count > 1:
    raise ConfigError(FIELD, n, f"splits one process's devices; this run has {process_count} "
                      "processes: set it to 0")
  if not 0 < n < total:
    raise ConfigError(FIELD, n, f"must leave the trainer devices: 0 < n < {total} (the "
                      "process's devices), or 0 for one mesh")
  if int(mesh_axes.get("context", 1)) != 1:
    raise ConfigError(FIELD, n, "does not combine with context parallelism (mesh.context "
                      f"= {mesh_axes.get('context')}): the ring attention of the trainer's "
                      "log-prob programs spans the trainer mesh only; set mesh.context=1")
  trainer, sampler = list(devices[:total - n]), list(devices[total - n:])
  for name, devs in (("trainer", trainer), ("sampler", sampler)):
    try:
      mesh_lib.resolve_mesh_shape(mesh_axes, len(devs))
    except ValueError as e:
      reason = e.problem if isinstance(e, ConfigError) else one_line(e)
      raise ConfigError(FIELD, n, f"leaves the {name} mesh {len(devs)} devices, which the mesh "
                        f"section {dict(mesh_axes)} cannot lay out ({reason}); each mesh "
                        "resolves the section's -1 axis against its own devices") from None
  return trainer, sampler


class SamplerMesh:
  """Where the sampler generates: a mesh of its own (`split`) or the trainer's.

  Attributes:
    mesh: the sampler's mesh (None: the trainer's, one mesh).
    param_shardings: the policy params' NamedShardings on `mesh` (None: one mesh).
  """

  def __init__(self, mesh=None, rules=None, param_shardings=None, trainer_mesh=None):
    self.mesh, self.rules, self.param_shardings = mesh, rules, param_shardings
    self._trainer_mesh = trainer_mesh
    self._bytes, self._seconds = 0, 0.0

  @property
  def split(self) -> bool:
    return self.mesh is not None

  def hand_over(self, params, donated=None):
    """`params` as the sampler's own arrays, ready (`overlap_update.hand_over`): on
    one mesh a copy of the leaves `donated` owns; split, every leaf not on the
    sampler mesh yet moved there, its bytes and seconds counted for `metrics`."""
    if not self.split:
      return overlap_update.hand_over(params, donated)
    moving = [x for x, s in zip(jax.tree.leaves(params), jax.tree.leaves(self.param_shardings))
              if x.sharding != s]
    if not moving:  # the sampler's already (the overlap's copy): the trainer owns none of it
      return params
    start = time.perf_counter()
    placed = overlap_update.hand_over(params, donated, self.param_shardings)
    self._seconds += time.perf_counter() - start
    self._bytes += overlap_update.tree_nbytes(moving)
    return placed

  def place(self, params):
    """The params the sampler generates with: `params` itself on one mesh (or
    already placed), else handed over (`hand_over`)."""
    return self.hand_over(params) if self.split else params

  def key(self, key):
    """A PRNG key on the sampler's devices (replicated), or `key` on one mesh."""
    return jax.device_put(key, sharding.replicated(self.mesh)) if self.split else key

  def running(self):
    """The sampler's mesh and the activation rules in context (a no-op on one mesh)."""
    return sharding.use_mesh(self.mesh, self.rules) if self.split else contextlib.nullcontext()

  def back(self, tree):
    """[batch, ...] arrays of the sampler's as the trainer's (its batch sharding);
    `tree` itself on one mesh (None leaves stay None)."""
    if not self.split:
      return tree
    return jax.tree.map(
        lambda x: jax.device_put(x, sharding.batch_sharding(self._trainer_mesh, self.rules,
                                                            x.ndim)), tree)

  def metrics(self) -> dict:
    """What was handed over since the last call ({} on one mesh)."""
    if not self.split:
      return {}
    out = {"overlap/handover_gib": self._bytes / overlap_update.GIB,
           "overlap/handover_s": self._seconds}
    self._bytes, self._seconds = 0, 0.0
    return out


def build(devices: Optional[Sequence], trainer_mesh, rules, model_config, mesh_axes,
          rollouts_per_step: int) -> SamplerMesh:
  """The run's `SamplerMesh`: over `devices` (the sampler's, `split_devices`), or
  the trainer's mesh when None.

  Raises:
    ConfigError: naming rl.sampler_devices when the model's params do not divide
      over the sampler mesh's axes, or a round's rows over its batch axes.
  """
  if devices is None:
    return SamplerMesh()
  mesh = mesh_lib.make_mesh(mesh_axes, devices)
  n = len(devices)
  try:
    shardings = state_lib.param_shardings(model_config, mesh, rules)
  except ConfigError as e:
    raise ConfigError(FIELD, n, f"gives a sampler mesh {dict(mesh.shape)} the model does not "
                      f"divide over: {e.problem}") from None
  divisor = 1
  for axis in sharding.batch_axes(mesh.axis_names, rules):
    divisor *= mesh.shape[axis]
  if rollouts_per_step % divisor:
    raise ConfigError(FIELD, n, f"gives a sampler mesh {dict(mesh.shape)} whose batch axes "
                      f"({divisor}) do not divide a round's {rollouts_per_step} rollouts "
                      "(rl.batch_size * rl.num_generations)")
  return SamplerMesh(mesh, rules, shardings, trainer_mesh)
