"""Ahead-of-time checks: compile the train step for a target mesh and report per-device memory.

`check(model_config, target, mesh_axes, rows, seq_len)` lowers and compiles
the GRPO train step (`jax.jit(...).lower(abstract inputs).compile()`) for
the target's devices without running anything, then reports bytes per
device: parameters and optimizer state (exact, from their shardings),
activations and gradients (the compiler's temp buffers, `memory_analysis`),
the batch, and the sampler's KV cache (exact, from the cache rules).

Devices: a TPU target first tries JAX's abstract topology
(`jax.experimental.topologies.get_topology_desc`, needs libtpu); where the
platform's compiler is not installed the step is compiled for the same
number of fake CPU devices and the report says so: parameter, optimizer
and KV-cache numbers stay exact, activation numbers come from the CPU
compiler (no TPU/GPU fusions or layouts), an estimate.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from rl_post import models
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rl.config import RLConfig
from rl_post.rl.train_step import make_rl_train_step
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.step import jit_train_step

GiB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Target:
  """A device kind and count: `topology` is JAX's TPU topology name (None: not TPU)."""
  platform: str
  num_devices: int
  hbm_bytes: int
  topology: str | None = None


# v5e: 16 GiB HBM per chip; v5p: 95 GiB per chip (v5p-64 = 64 TensorCores = 32 chips);
# H100 SXM: 80 GiB.
TARGETS = {
    "v5e-8": Target("tpu", 8, 16 * GiB, "v5e:2x4"),
    "v5p-64": Target("tpu", 32, 95 * GiB, "v5p:2x4x4"),
    "8xh100": Target("gpu", 8, 80 * GiB),
    "16xh100": Target("gpu", 16, 80 * GiB),
}

# Shapes from the public HF configs (SmolLM2-135M, Llama-3.2-1B, Llama-3.1-8B).
MODELS = {
    "smollm2-135m": models.ModelConfig(vocab_size=49152, num_layers=30, embed_dim=576,
                                       num_heads=9, num_kv_heads=3, head_dim=64, mlp_dim=1536,
                                       rope_theta=100000.0, tie_embeddings=True,
                                       attention_impl="xla"),
    "llama-1b": models.ModelConfig(vocab_size=128256, num_layers=16, embed_dim=2048,
                                   num_heads=32, num_kv_heads=8, head_dim=64, mlp_dim=8192,
                                   rope_theta=500000.0, tie_embeddings=True,
                                   attention_impl="xla"),
    "llama-8b": models.ModelConfig(vocab_size=128256, num_layers=32, embed_dim=4096,
                                   num_heads=32, num_kv_heads=8, head_dim=128, mlp_dim=14336,
                                   rope_theta=500000.0, tie_embeddings=False,
                                   attention_impl="xla"),
}


def target_devices(target: Target) -> tuple[list, str]:
  """Devices to compile for, and how they were obtained (for the report).

  Raises:
    RuntimeError: when neither the abstract topology nor enough CPU devices
      exist (start the process with jax_num_cpu_devices >= num_devices).
  """
  if target.topology:
    try:
      from jax.experimental import topologies
      devices = topologies.get_topology_desc(target.topology, target.platform).devices
      if len(devices) == target.num_devices:
        return list(devices), f"abstract {target.topology} topology"
    except Exception as e:  # libtpu missing or unknown topology name
      reason = str(e).splitlines()[0][:120]
  else:
    reason = f"JAX has no abstract {target.platform.upper()} topology for ahead-of-time compiles"
  cpus = jax.devices("cpu")
  if len(cpus) < target.num_devices:
    raise RuntimeError(f"{reason}; and only {len(cpus)} CPU devices for the fallback: set "
                       f"jax.config.update('jax_num_cpu_devices', {target.num_devices}) "
                       "before JAX starts")
  return cpus[:target.num_devices], (f"{target.num_devices} fake CPU devices ({reason}); "
                                     "activation bytes are a CPU-compiler estimate")


def _bytes_per_device(abstract_tree, shardings_tree) -> int:
  def one(a, s):
    return math.prod(s.shard_shape(a.shape)) * jnp.dtype(a.dtype).itemsize
  return int(sum(jax.tree.leaves(jax.tree.map(one, abstract_tree, shardings_tree))))


def kv_cache_bytes(model_config, mesh, rules, rows: int, seq_len: int) -> int:
  """Per-device bytes of the sampler's K and V caches for `rows` sequences."""
  spec = sharding.logical_to_spec(("cache_batch", "cache_length", "cache_kv_heads", "head_dim"),
                                  rules, mesh.axis_names)
  shape = (rows, seq_len, model_config.num_kv_heads, model_config.head_dim)
  shard = jax.sharding.NamedSharding(mesh, spec).shard_shape(shape)
  return 2 * model_config.num_layers * math.prod(shard) * jnp.dtype(model_config.dtype).itemsize


def check(model_config, target: Target, mesh_axes: dict, rows: int, seq_len: int,
          rules=sharding.DEFAULT_RULES, *, constrain_activations: bool = True) -> dict:
  """Compiles the GRPO train step for `target` and returns per-device bytes.

  Args:
    model_config: the model to check.
    target: device kind and count (see TARGETS).
    mesh_axes: the `mesh` config section, e.g. {"data": 1, "fsdp": -1}.
    rows: rollouts per train step (N = B x G); the sampler holds as many.
    seq_len: prompt + response tokens (T).
    constrain_activations: compile with the mesh in context, as a run does, so
      the model's `batch` constraints apply; False shows what the partitioner
      picks without them.
  Returns:
    A dict of byte counts per device, `total_bytes` (train step peak:
    arguments + temps), `fits` against the target's HBM, and `devices`.
  Raises:
    ValueError: when the mesh or batch does not divide (named like the config).
  """
  devices, how = target_devices(target)
  mesh = mesh_lib.make_mesh(mesh_axes, devices)
  sharding.validate_rules(rules, mesh.axis_names)
  optimizer = make_optimizer(OptimizerConfig())
  shardings = state_lib.state_shardings(model_config, optimizer, mesh, rules)
  abstract_state = state_lib.abstract_state(model_config, optimizer, mesh, rules)
  batch_sh = {k: sharding.batch_sharding(mesh, rules, 2)
              for k in ("tokens", "mask", "old_logp", "adv")}
  divisor = math.prod(mesh.shape[a] for a in sharding._as_tuple(batch_sh["adv"].spec[0]))
  if rows % divisor:
    raise ValueError(f"rows ({rows}) must be a multiple of the mesh batch axes ({divisor})")
  dtypes = dict(tokens=jnp.int32, mask=jnp.int32, old_logp=jnp.float32, adv=jnp.float32)
  batch = {k: jax.ShapeDtypeStruct((rows, seq_len), dtypes[k], sharding=batch_sh[k])
           for k in dtypes}
  rl = RLConfig(batch_size=1, num_generations=2)
  step = jit_train_step(make_rl_train_step(model_config, rl, optimizer,
                                           context_mesh=mesh_lib.context_mesh(mesh)),
                        shardings, batch_sh)
  if constrain_activations:
    with sharding.use_mesh(mesh, rules):  # as setup_run: activations follow the rules
      compiled = step.lower(abstract_state, batch).compile()
  else:
    compiled = step.lower(abstract_state, batch).compile()
  stats = compiled.memory_analysis()
  report = dict(
      devices=how, num_devices=len(devices),
      mesh={k: int(v) for k, v in zip(mesh.axis_names, mesh.devices.shape)},
      num_params=int(sum(np.prod(a.shape) for a in jax.tree.leaves(abstract_state.params))),
      params_bytes=_bytes_per_device(abstract_state.params, shardings.params),
      opt_state_bytes=_bytes_per_device(abstract_state.opt_state, shardings.opt_state),
      batch_bytes=_bytes_per_device(batch, batch_sh),
      activation_bytes=int(stats.temp_size_in_bytes),
      kv_cache_bytes=kv_cache_bytes(model_config, mesh, rules, rows, seq_len),
      hbm_bytes=target.hbm_bytes, constrain_activations=constrain_activations)
  report["total_bytes"] = int(stats.argument_size_in_bytes + stats.temp_size_in_bytes)
  report["sampler_bytes"] = report["params_bytes"] + report["kv_cache_bytes"]
  report["fits"] = max(report["total_bytes"], report["sampler_bytes"]) <= target.hbm_bytes
  return report
