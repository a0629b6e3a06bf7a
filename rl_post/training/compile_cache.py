"""The persistent XLA compilation cache every entry point turns on.

A jitted program compiles once per process; with a cache directory, XLA's
executable is also written to disk and the next process that builds the
same program (same computation, shapes, jax/jaxlib version, backend and
compile options) loads it instead of compiling it again. Runs share one
directory, so a user's second run, or the second seed of a sweep, starts
with its programs already built. A hit loads the executable XLA would
have compiled: no number changes.

Where it lives (`compile.cache_dir` in the config; `configs/base.py`):
  "auto"   (default) $RL_POST_COMPILE_CACHE if set ("" there: off), else
           JAX's own $JAX_COMPILATION_CACHE_DIR if set, else
           $XDG_CACHE_HOME/rl_post/jax (~/.cache/rl_post/jax).
  ""       off: every program compiles in every process.
  a path   that directory (made if missing).
A directory that cannot be made or written is a user error when the user
named it (the config or $RL_POST_COMPILE_CACHE) and, for the default one
(say, a read-only home), a logged warning: the run goes on without a cache.

`compile.min_compile_s`: programs that compiled faster than this are not
written (JAX's default, 1 s, would leave out most of a CPU run's programs:
every sampler and update piece of the tiny configs compiles in less).

`rl_post.cli.run` calls `apply(config)` before `main`; benchmarks that do
not go through it call `enable(path)` themselves.
"""

import dataclasses
import logging
import os
import tempfile

import jax

from rl_post.config_sections import check, from_section
from rl_post.errors import ConfigError

ENV = "RL_POST_COMPILE_CACHE"
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class CompileConfig:
  """The `compile` config section.

  Attributes:
    cache_dir: "auto", "" (off) or a directory (see the module docstring).
    min_compile_s: the shortest compile whose executable is written to the cache.
  """
  cache_dir: str = AUTO
  min_compile_s: float = 0.0

  def __post_init__(self):
    check(isinstance(self.cache_dir, str), "cache_dir", 'must be a string ("auto", "" or a '
          "directory)", self.cache_dir)
    check(isinstance(self.min_compile_s, (int, float)) and self.min_compile_s >= 0,
          "min_compile_s", "must be a number >= 0", self.min_compile_s)


@dataclasses.dataclass(frozen=True)
class CacheChoice:
  """Where the cache goes: `path` ("" = off) and who chose it (`field`, shown in errors)."""
  path: str
  field: str
  explicit: bool  # the user named it: a bad directory is an error, not a warning


def default_dir(environ=None) -> str:
  """$XDG_CACHE_HOME/rl_post/jax, else ~/.cache/rl_post/jax."""
  environ = os.environ if environ is None else environ
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "rl_post", "jax")


def choose(cache_dir: str, environ=None, jax_dir: str | None = None) -> CacheChoice:
  """The cache directory for `compile.cache_dir` (pure: the environment is an argument).

  Args:
    cache_dir: the config's value ("auto", "" or a path).
    environ: the process environment (default os.environ).
    jax_dir: JAX's own setting (`jax_compilation_cache_dir`, from
      $JAX_COMPILATION_CACHE_DIR), or None.
  """
  environ = os.environ if environ is None else environ
  if cache_dir != AUTO:
    return CacheChoice(os.path.expanduser(cache_dir), "compile.cache_dir", True)
  if ENV in environ:
    return CacheChoice(os.path.expanduser(environ[ENV]), f"${ENV}", True)
  if jax_dir:
    return CacheChoice(jax_dir, "$JAX_COMPILATION_CACHE_DIR", True)
  return CacheChoice(default_dir(environ), "compile.cache_dir", False)


def check_writable(path: str) -> str | None:
  """None if `path` is (or can be made) a directory this process can write to,
  else why not."""
  if os.path.exists(path) and not os.path.isdir(path):
    return "is a file, not a directory"
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".rl_post_probe_"):
      pass
  except OSError as e:
    return f"cannot be made or written ({e.strerror or e})"
  return None


def enable(path: str, min_compile_s: float = 0.0) -> None:
  """Points JAX's persistent cache at `path` ("" turns it off) for this process.

  Programs compiled before this call are not written; a process that had
  already opened another cache directory switches to this one.
  """
  from jax._src import compilation_cache  # noqa: PLC0415 (JAX offers no public reset)
  current = jax.config.jax_compilation_cache_dir
  if compilation_cache.is_initialized() and (current or "") != path:
    compilation_cache.reset_cache()  # JAX opens its cache once per process
  jax.config.update("jax_compilation_cache_dir", path or None)
  jax.config.update("jax_enable_compilation_cache", bool(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_s))
  # -1: every size is written, and JAX's filesystem-dependent override stays off
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def apply(config) -> str:
  """Turns the cache on (or off) from `config`'s `compile` section; returns the
  directory in use ("" = none).

  Raises:
    ConfigError: a directory the user named cannot be made or written.
  """
  section = config.get("compile") if config is not None and hasattr(config, "get") else None
  settings = from_section(CompileConfig, section, "compile")
  choice = choose(settings.cache_dir, jax_dir=jax.config.jax_compilation_cache_dir)
  problem = check_writable(choice.path) if choice.path else None
  if problem and choice.explicit:
    raise ConfigError(choice.field, choice.path, f"{problem}: point it at a writable "
                      "directory, or set compile.cache_dir='' to compile without a cache")
  if problem:
    logging.warning("compilation cache %s %s; running without one (set compile.cache_dir or "
                    "$%s to choose another directory)", choice.path, problem, ENV)
  path = "" if problem else choice.path
  enable(path, settings.min_compile_s)
  # debug, not info: a run that stops on a bad input prints its one error line alone
  logging.debug("compilation cache: %s", path or "off")
  return path
