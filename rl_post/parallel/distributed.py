"""Multi-controller JAX: `jax.distributed.initialize` from the config or the environment.

Every host runs the same program; after initialisation `jax.devices()` lists
the devices of all hosts and one mesh spans them (multi-controller SPMD, no
extra runtime). The `distributed` config section picks how a process finds
the others:

  mode="off"       single process (the default); nothing is initialised.
  mode="explicit"  coordinator_address, num_processes and process_id from the
                   config (or the RL_POST_* variables below, which win so one
                   config serves every host).
  mode="auto"      from the environment: RL_POST_COORDINATOR_ADDRESS /
                   RL_POST_NUM_PROCESSES / RL_POST_PROCESS_ID if set, else a
                   SLURM job step or a Cloud TPU VM slice (JAX reads their
                   variables and metadata itself; RL_POST_CLUSTER=tpu|slurm
                   forces one, as launch/tpu_pod.sh does); a single-host
                   environment stays single-process.

`initialize` runs once per process, before anything touches a JAX backend
(`rl_post.training.run.setup_run` calls it first).
"""

import dataclasses
import os
from typing import Mapping

import jax
from absl import logging

from rl_post.config_sections import check, from_section

MODES = ("off", "auto", "explicit")
ENV_COORDINATOR = "RL_POST_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "RL_POST_NUM_PROCESSES"
ENV_PROCESS_ID = "RL_POST_PROCESS_ID"
ENV_CLUSTER = "RL_POST_CLUSTER"
CLUSTERS = ("tpu", "slurm")
# Variables that say "this is one worker of a multi-host Cloud TPU slice".
_TPU_ENV = ("TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID", "TPU_WORKER_ID", "MEGASCALE_COORDINATOR_ADDRESS")


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """Attributes:
    mode: "off" | "auto" | "explicit" (see the module docstring).
    coordinator_address: "host:port" of process 0's coordinator service.
    num_processes: total number of processes (hosts), > 0 in explicit mode.
    process_id: this process's index in [0, num_processes).
    local_device_ids: devices this process drives (empty: all it sees), e.g.
      one process per GPU.
    timeout_s: how long to wait for every process to join.
  """
  mode: str = "off"
  coordinator_address: str = ""
  num_processes: int = 0
  process_id: int = -1
  local_device_ids: tuple = ()
  timeout_s: int = 300

  def __post_init__(self):
    check(self.mode in MODES, "mode", f"must be one of {MODES}", self.mode)
    check(self.timeout_s > 0, "timeout_s", "must be > 0", self.timeout_s)
    check(all(isinstance(i, int) and i >= 0 for i in self.local_device_ids),
          "local_device_ids", "must be non-negative ints", self.local_device_ids)


@dataclasses.dataclass(frozen=True)
class InitArgs:
  """What to pass to `jax.distributed.initialize`; None fields: JAX detects them."""
  source: str                      # "config", "env", "slurm" or "tpu"
  coordinator_address: str | None = None
  num_processes: int | None = None
  process_id: int | None = None
  local_device_ids: tuple | None = None

  def kwargs(self) -> dict:
    names = ("coordinator_address", "num_processes", "process_id", "local_device_ids")
    return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


def _env_int(environ: Mapping[str, str], name: str) -> int:
  try:
    return int(environ[name])
  except ValueError:
    raise ValueError(f"environment variable {name}={environ[name]!r} must be an int") from None


def _explicit(address: str, num: int, pid: int, source: str, local_ids) -> InitArgs:
  if not address or ":" not in address:
    raise ValueError(f"distributed.coordinator_address must be 'host:port', got {address!r} "
                     f"(from {source})")
  if num < 1:
    raise ValueError(f"distributed.num_processes must be >= 1, got {num} (from {source})")
  if not 0 <= pid < num:
    raise ValueError(f"distributed.process_id must be in [0, {num}), got {pid} (from {source})")
  return InitArgs(source, address, num, pid, tuple(local_ids) or None)


def resolve(config: DistributedConfig, environ: Mapping[str, str] | None = None) -> InitArgs | None:
  """The initialisation this process needs, or None for a single process.

  Pure (reads only `environ`, default `os.environ`), so it is testable
  without starting anything.

  Raises:
    ValueError: naming the field or variable that is missing or wrong.
  """
  environ = os.environ if environ is None else environ
  if config.mode == "off":
    return None
  env_keys = (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID)
  present = [k for k in env_keys if k in environ]
  if present and len(present) != 3:
    missing = sorted(set(env_keys) - set(present))
    raise ValueError(f"{present} are set but {missing} are not; set all three or none")
  if present:
    return _explicit(environ[ENV_COORDINATOR], _env_int(environ, ENV_NUM_PROCESSES),
                     _env_int(environ, ENV_PROCESS_ID), "env", config.local_device_ids)
  if config.mode == "explicit":
    return _explicit(config.coordinator_address, config.num_processes, config.process_id,
                     "config", config.local_device_ids)
  if ENV_CLUSTER in environ:
    if environ[ENV_CLUSTER] not in CLUSTERS:
      raise ValueError(f"{ENV_CLUSTER}={environ[ENV_CLUSTER]!r} must be one of {CLUSTERS}")
    return InitArgs(environ[ENV_CLUSTER], local_device_ids=tuple(config.local_device_ids) or None)
  if "SLURM_JOB_ID" in environ and "SLURM_STEP_NODELIST" in environ:
    ntasks = _env_int(environ, "SLURM_NTASKS") if "SLURM_NTASKS" in environ else 1
    if ntasks > 1:
      return InitArgs("slurm", local_device_ids=tuple(config.local_device_ids) or None)
    return None
  if any(k in environ for k in _TPU_ENV):
    hosts = environ.get("TPU_WORKER_HOSTNAMES", "")
    if "," in hosts or "MEGASCALE_COORDINATOR_ADDRESS" in environ:
      return InitArgs("tpu")
  return None


_INITIALIZED: InitArgs | None = None


def _backend_started() -> bool:
  from jax._src import xla_bridge  # no public API says whether a backend exists yet
  return xla_bridge.backends_are_initialized()


def initialize(section) -> InitArgs | None:
  """Initialises multi-controller JAX per the `distributed` section; once per process.

  Args:
    section: the config's `distributed` section (ConfigDict/dict) or None, or
      the section already parsed (a `DistributedConfig`).
  Returns:
    The InitArgs used (also on a repeated call), or None when single-process.
  Raises:
    RuntimeError: when a JAX backend was already started in this process
      (distributed init must come first).
  """
  global _INITIALIZED
  config = (section if isinstance(section, DistributedConfig)
            else from_section(DistributedConfig, section, "distributed"))
  args = resolve(config)
  if args is None or _INITIALIZED is not None:
    return _INITIALIZED if args is not None else None
  if _backend_started():
    raise RuntimeError("jax.distributed.initialize must run before any JAX computation; "
                       "call rl_post.parallel.distributed.initialize first in the entry point")
  logging.info("jax.distributed.initialize (%s): %s", args.source, args.kwargs())
  jax.distributed.initialize(initialization_timeout=config.timeout_s, **args.kwargs())
  _INITIALIZED = args
  if jax.process_index() != 0:  # logs and metrics come from process 0
    logging.set_verbosity(logging.WARNING)
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
  return args


def is_primary() -> bool:
  """True on the process that writes metrics, reports and logs (process 0)."""
  return jax.process_index() == 0
