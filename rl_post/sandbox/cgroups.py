"""Per-worker cgroups (v1 memory + pids, or v2) for whole-run limits.

A worker runs one candidate at a time, so the worker's cgroup bounds the
run: memory (all processes together, OOM kills counted) and number of
tasks. The host (root in CI) creates the cgroup, a tiny shell wrapper
joins it before exec'ing the worker, and the host reads the OOM counter
around each run and kills every member at shutdown.
"""

import os
import signal
import uuid

_V1_ROOT = "/sys/fs/cgroup"
_V2_ROOT = "/sys/fs/cgroup"
_PARENT_NAME = "rl_post_sandbox"


def _own_path(controller):
  try:
    with open("/proc/self/cgroup") as f:
      for line in f:
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if controller in controllers.split(","):
          return path
  except OSError:
    pass
  return "/"


def _write(path, value):
  with open(path, "w") as f:
    f.write(str(value))


def _read_kv(path, key):
  try:
    with open(path) as f:
      for line in f:
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
          return int(parts[1])
  except OSError:
    pass
  return 0


class _Root:
  """Where worker cgroups are created; `version` is 1 or 2."""

  def __init__(self, version, bases):
    self.version = version
    self.bases = bases  # v1: {"memory": dir, "pids": dir}; v2: {"unified": dir}

  def create(self, name):
    dirs = {}
    for controller, base in self.bases.items():
      path = os.path.join(base, name)
      os.mkdir(path)
      dirs[controller] = path
    return WorkerCgroup(self.version, dirs)


def detect(mode):
  """Returns a usable cgroup root, or None (mode "auto"); raises if "require".

  Args:
    mode: "auto" | "require" | "off".
  """
  if mode == "off":
    return None
  errors = []
  for probe in (_probe_v1, _probe_v2):
    try:
      root = probe()
      if root is not None:
        return root
    except OSError as e:
      errors.append(f"{probe.__name__[7:]}: {e}")
  if mode == "require":
    raise RuntimeError(
        "cgroups='require' but no writable cgroup memory+pids controllers "
        f"were found ({'; '.join(errors) or 'none mounted'}). Run as root "
        "with /sys/fs/cgroup mounted read-write, or set cgroups='auto'.")
  return None


def _probe_v1():
  bases = {}
  for controller in ("memory", "pids"):
    mount = os.path.join(_V1_ROOT, controller)
    if not os.path.exists(os.path.join(mount, "cgroup.procs")):
      return None
    own = os.path.join(mount, _own_path(controller).lstrip("/"))
    parent = own if os.path.isdir(own) else mount
    base = os.path.join(parent, _PARENT_NAME)
    os.makedirs(base, exist_ok=True)
    probe = os.path.join(base, "probe-" + uuid.uuid4().hex[:8])
    os.mkdir(probe)
    os.rmdir(probe)
    bases[controller] = base
  return _Root(1, bases)


def _probe_v2():
  if not os.path.exists(os.path.join(_V2_ROOT, "cgroup.controllers")):
    return None
  with open(os.path.join(_V2_ROOT, "cgroup.controllers")) as f:
    available = f.read().split()
  if "memory" not in available or "pids" not in available:
    return None
  _write(os.path.join(_V2_ROOT, "cgroup.subtree_control"), "+memory +pids")
  base = os.path.join(_V2_ROOT, _PARENT_NAME)
  os.makedirs(base, exist_ok=True)
  _write(os.path.join(base, "cgroup.subtree_control"), "+memory +pids")
  return _Root(2, {"unified": base})


def new_name(pool_id, index, generation):
  return f"{pool_id}-w{index}-g{generation}"


class WorkerCgroup:
  """One worker's cgroup directories."""

  def __init__(self, version, dirs):
    self.version = version
    self.dirs = dirs
    self._memory_bytes = None
    self._max_tasks = None

  def procs_files(self):
    return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

  def set_limits(self, memory_bytes, max_tasks):
    if memory_bytes != self._memory_bytes:
      if self.version == 1:
        mem = self.dirs["memory"]
        memsw = os.path.join(mem, "memory.memsw.limit_in_bytes")
        # memsw >= limit must hold at every step: order by direction.
        grow = (self._memory_bytes is not None and
                memory_bytes > self._memory_bytes)
        steps = [(memsw, memory_bytes), (os.path.join(
            mem, "memory.limit_in_bytes"), memory_bytes)]
        for path, value in (steps if grow else steps[::-1]):
          if os.path.exists(path):
            _write(path, value)
      else:
        d = self.dirs["unified"]
        _write(os.path.join(d, "memory.max"), memory_bytes)
        if os.path.exists(os.path.join(d, "memory.swap.max")):
          _write(os.path.join(d, "memory.swap.max"), 0)
      self._memory_bytes = memory_bytes
    if max_tasks != self._max_tasks:
      pids_dir = self.dirs.get("pids", self.dirs.get("unified"))
      _write(os.path.join(pids_dir, "pids.max"), max_tasks)
      self._max_tasks = max_tasks

  def oom_kills(self):
    if self.version == 1:
      return _read_kv(os.path.join(self.dirs["memory"], "memory.oom_control"),
                      "oom_kill")
    return _read_kv(os.path.join(self.dirs["unified"], "memory.events"),
                    "oom_kill")

  def pids(self):
    found = set()
    for path in self.procs_files():
      try:
        with open(path) as f:
          found.update(int(x) for x in f.read().split())
      except OSError:
        pass
    return found

  def kill_all(self, keep=()):
    """SIGKILLs every member except `keep`; returns how many were signalled."""
    if self.version == 2 and not keep:
      try:
        _write(os.path.join(self.dirs["unified"], "cgroup.kill"), 1)
        return -1
      except OSError:
        pass
    killed = 0
    for _ in range(50):  # members may fork while we kill: repeat
      victims = self.pids() - set(keep)
      if not victims:
        break
      for pid in victims:
        try:
          os.kill(pid, signal.SIGKILL)
          killed += 1
        except OSError:
          pass
    return killed

  def remove(self):
    for path in self.dirs.values():
      try:
        os.rmdir(path)
      except OSError:
        pass
