"""Host memory policy for XLA:CPU: keep freed memory instead of re-faulting it.

XLA:CPU gives every call of a compiled program one temp buffer for all its
intermediates (`compiled.memory_analysis().temp_size_in_bytes`; for an RL
update, such as that of `vs_trl.py`'s 4-layer d=128 model, it is above
glibc's mmap threshold). glibc serves an allocation above its mmap threshold
(at most 32 MiB) with a fresh `mmap` and returns it with `munmap` on free,
so every call touches a new zeroed mapping: one page fault per 4 KiB page.
`experiments/benchmarks/host_malloc.py` measures the page faults and the
time they cost (docs/results.md, "Host memory policy"). PyTorch on
the same workload allocates tensors below the threshold, which glibc
reuses from its heap.

`retain_freed_memory()` sets glibc's malloc to serve every thread from the
main heap (`M_ARENA_MAX=1`: the threads' own arenas cannot hold a chunk
above 64 MiB and fall back to `mmap`), never to `mmap` (`M_MMAP_MAX=0`) and
to keep up to 1 GiB of free memory at the heap's top (`M_TRIM_THRESHOLD`),
so the second call of a program reuses the first call's pages. Peak memory
does not change; freed memory stays with the process instead of going back
to the OS.

Retaining is right for the next call of the same program, wrong before a
program whose temp buffer is bigger than any free hole in the heap: that
buffer is one allocation, so it extends the heap while the holes left by
other phases (loading the model, the rollout's decode weights and caches)
stay resident. `release_free_memory()` hands those holes back to the OS
(`malloc_trim`); the RL trainer calls it before each update. In
SmolLM2-135M's GRPO step the heap holds holes left by loading and the rollout
when the update's temp buffer is allocated, so releasing them lowers the
step's peak RSS (`experiments/benchmarks/smollm2_step.py` measures the
step's peak; docs/results.md, "Update memory", has the figures).

The malloc settings only work before the XLA backend exists (the backend's threads pick
their malloc arena when they start) and only with glibc. Entry points call
`apply_policy()` first thing; `RL_POST_HOST_MALLOC` chooses:
  auto    (default) retain when JAX will run on the CPU (JAX_PLATFORMS says
          cpu, or no GPU/TPU plugin is installed), else leave malloc alone:
          on an accelerator host the big buffers live on the device.
  retain  always retain (glibc only).
  system  never touch malloc.
"""

import ctypes
import importlib.metadata
import importlib.util
import logging
import os
import sys

ENV = "RL_POST_HOST_MALLOC"
POLICIES = ("auto", "retain", "system")
TRIM_THRESHOLD_BYTES = 1 << 30
# mallopt parameter numbers, glibc's malloc.h
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_ACCELERATOR_MODULES = ("libtpu", "jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin",
                        "jax_rocm7_plugin")

_SETTINGS = ((_M_ARENA_MAX, "arena_max", 1), (_M_MMAP_MAX, "mmap_max", 0),
             (_M_TRIM_THRESHOLD, "trim_threshold", TRIM_THRESHOLD_BYTES))

_applied: dict | None = None


def glibc_tunables() -> str:
  """The same settings as a `GLIBC_TUNABLES` value, for a process started by us
  that is not ours (e.g. a baseline in a benchmark)."""
  return ":".join(f"glibc.malloc.{name}={value}" for _, name, value in _SETTINGS)


def policy_from_env(environ=None) -> str:
  """The chosen policy; a clear error for an unknown value."""
  value = (os.environ if environ is None else environ).get(ENV, "auto").strip().lower() or "auto"
  if value not in POLICIES:
    raise ValueError(f"{ENV}={value!r}: must be one of {POLICIES}")
  return value


def _backend_initialized() -> bool:
  bridge = sys.modules.get("jax._src.xla_bridge")
  check = getattr(bridge, "backends_are_initialized", None)
  return bool(check and check())


def jax_platforms(environ=None) -> str:
  """JAX's requested platforms ('' = let JAX choose), read without starting a backend."""
  jax = sys.modules.get("jax")
  if jax is not None:
    return str(getattr(jax.config, "jax_platforms", "") or "")
  return (os.environ if environ is None else environ).get("JAX_PLATFORMS", "")


def accelerator_plugin_installed() -> bool:
  """Whether a GPU/TPU backend for JAX is installed (found without importing it)."""
  for name in _ACCELERATOR_MODULES:
    if importlib.util.find_spec(name) is not None:
      return True
  namespace = importlib.util.find_spec("jax_plugins")
  if namespace is not None and any(
      os.listdir(d) for d in (namespace.submodule_search_locations or ()) if os.path.isdir(d)):
    return True
  try:
    return bool(list(importlib.metadata.entry_points(group="jax_plugins")))
  except Exception:  # noqa: BLE001 - a broken metadata install means: assume none
    return False


def runs_on_cpu(environ=None) -> bool:
  platforms = jax_platforms(environ)
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  return not accelerator_plugin_installed()


def _glibc():
  libc = ctypes.CDLL(None)
  if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
    return None
  return libc


def retain_freed_memory() -> dict:
  """Sets glibc's malloc to reuse freed memory (see the module docstring).

  Returns:
    {"applied": bool, "reason": str}: not applied when the libc is not glibc,
    when the XLA backend already started (too late: its threads have their
    arenas) or when glibc refuses a setting.
  """
  global _applied
  if _applied is not None and _applied["applied"]:
    return _applied
  libc = _glibc()
  if libc is None:
    return dict(applied=False, reason="not glibc")
  if _backend_initialized():
    return dict(applied=False, reason="the XLA backend already started; call this first")
  refused = [p for p, _, v in _SETTINGS if libc.mallopt(ctypes.c_int(p), ctypes.c_int(v)) != 1]
  if refused:
    return dict(applied=False, reason=f"glibc refused mallopt parameters {refused}")
  _applied = dict(applied=True, reason="glibc: one arena, no mmap, 1 GiB trim threshold")
  return _applied


def release_free_memory() -> bool:
  """Returns the heap's free pages to the OS (glibc `malloc_trim(0)`).

  Memory still in use is untouched; a later allocation that lands on a
  released page faults it in again. Returns False where the libc is not glibc.
  """
  libc = _glibc()
  if libc is None or not hasattr(libc, "malloc_trim"):
    return False
  libc.malloc_trim(ctypes.c_size_t(0))
  return True


def apply_policy(environ=None) -> dict:
  """Applies `RL_POST_HOST_MALLOC` (module docstring); returns what happened."""
  policy = policy_from_env(environ)
  if policy == "system" or (policy == "auto" and not runs_on_cpu(environ)):
    return dict(policy=policy, applied=False, reason="malloc left alone")
  result = dict(policy=policy, **retain_freed_memory())
  if not result["applied"]:
    logging.info("host memory policy %s not applied: %s", policy, result["reason"])
  return result
