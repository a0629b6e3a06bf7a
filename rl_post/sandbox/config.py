"""SandboxConfig: every limit and isolation setting in one frozen dataclass."""

import dataclasses
import os

ISOLATIONS = ("strict", "process")
CGROUP_MODES = ("auto", "require", "off")

# Imported once in the zygote so a run never pays for them. Pure-stdlib,
# no modules that open sockets or read host state at import.
DEFAULT_PRELOAD = (
    "abc", "array", "bisect", "collections", "copy", "dataclasses",
    "datetime", "decimal", "enum", "fractions", "functools", "hashlib",
    "heapq", "io", "itertools", "json", "math", "operator", "random", "re",
    "statistics", "string", "textwrap", "typing", "unicodedata", "sqlite3",
    "threading", "traceback",
)


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
  """How candidate programs are confined and limited.

  Attributes:
    isolation: "strict" (namespaces + bubblewrap root + seccomp + cgroups) or
      "process" (rlimits, own session, temporary work dir, empty
      environment). "process" is weaker and must be chosen explicitly.
    num_workers: warm zygote workers, i.e. runs in parallel.
    timeout_s: default wall-clock limit per run (CPU limit is derived).
    memory_mb: default memory limit for the whole run (cgroup), also the
      per-process address-space limit on top of the interpreter's own size.
    max_procs: processes + threads of one run (RLIMIT_NPROC in the run's user
      namespace; cgroup pids.max on top when cgroups are usable).
    max_open_files: RLIMIT_NOFILE.
    max_file_mb: largest file a run can write (RLIMIT_FSIZE).
    work_dir_mb, tmp_mb: size of the private tmpfs on /work and /tmp.
    max_output_bytes: cap per stream (stdout, stderr), enforced while
      streaming; exceeding it kills the run with status "output_limit".
    max_files_out, max_files_out_mb: caps on the files returned.
    max_input_bytes: cap on code + stdin + input files of one request.
    max_runs_per_worker: a worker is replaced after this many runs.
    python_executable: interpreter used inside the sandbox (stdlib only);
      it must be readable by `sandbox_uid`.
    preload_modules: modules the zygote imports before forking runs.
    sandbox_uid, sandbox_gid: when the host runs as root, workers drop to
      this uid/gid before anything else (so RLIMIT_NPROC applies).
    cgroups: "auto" (use cgroup v1/v2 memory + pids when writable), "require"
      (fail at start-up otherwise) or "off".
    seccomp: install the syscall deny list in every candidate process.
    startup_timeout_s: how long a worker may take to become ready.
    extra_ro_paths: host paths bound read-only into the strict root.
  """
  isolation: str = "strict"
  num_workers: int = 2
  timeout_s: float = 10.0
  memory_mb: int = 512
  max_procs: int = 64
  max_open_files: int = 256
  max_file_mb: int = 16
  work_dir_mb: int = 64
  tmp_mb: int = 64
  max_output_bytes: int = 1 << 20
  max_files_out: int = 256
  max_files_out_mb: int = 16
  max_input_bytes: int = 16 << 20
  max_runs_per_worker: int = 1000
  python_executable: str = "/usr/bin/python3"
  preload_modules: tuple = DEFAULT_PRELOAD
  sandbox_uid: int = 65534
  sandbox_gid: int = 65534
  cgroups: str = "auto"
  seccomp: bool = True
  startup_timeout_s: float = 30.0
  extra_ro_paths: tuple = ()

  def __post_init__(self):
    if self.isolation not in ISOLATIONS:
      raise ValueError(f"isolation must be one of {ISOLATIONS}, "
                       f"got {self.isolation!r}")
    if self.cgroups not in CGROUP_MODES:
      raise ValueError(f"cgroups must be one of {CGROUP_MODES}, "
                       f"got {self.cgroups!r}")
    positive = ("num_workers", "timeout_s", "memory_mb", "max_procs",
                "max_open_files", "max_file_mb", "work_dir_mb", "tmp_mb",
                "max_output_bytes", "max_files_out", "max_files_out_mb",
                "max_input_bytes", "max_runs_per_worker", "startup_timeout_s")
    for name in positive:
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
      if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if self.max_open_files < 16:
      raise ValueError("max_open_files must be >= 16 (the interpreter needs "
                       f"a few), got {self.max_open_files}")
    if self.max_procs < 4:
      raise ValueError(f"max_procs must be >= 4, got {self.max_procs}")
    if not os.path.isabs(self.python_executable):
      raise ValueError("python_executable must be an absolute path, got "
                       f"{self.python_executable!r}")
    for path in self.extra_ro_paths:
      if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(f"extra_ro_paths entries must be absolute paths, "
                         f"got {path!r}")
    for name in self.preload_modules:
      if not isinstance(name, str) or not name.replace(".", "").replace(
          "_", "").isalnum():
        raise ValueError(f"preload_modules entries must be module names, "
                         f"got {name!r}")
