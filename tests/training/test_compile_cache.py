"""The persistent compilation cache (rl_post/training/compile_cache.py): where it goes,
off when asked, hits across processes, and bad directories.

Everything that turns a cache on runs in a child process: the suite's own cache
(tests/conftest.py) is process-wide state of this one.
"""

import json
import os
import subprocess
import sys

import pytest

from rl_post.errors import ConfigError
from rl_post.training import compile_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A child that applies a config's `compile` section, builds one jitted program, and
# prints the cache it used and how many programs JAX loaded from it.
_CHILD = r"""
import json, sys
import jax, jax.numpy as jnp
import ml_collections
from rl_post.training import compile_cache
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits"
    else None)
config = ml_collections.ConfigDict(dict(compile=json.loads(sys.argv[1])))
path = compile_cache.apply(config)
x = jnp.arange(24.0).reshape(4, 6)
y = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(axis=1) * 3.0 + 1.0)(x)
y.block_until_ready()
print(json.dumps(dict(path=path, hits=len(hits), value=float(y.sum()))))
"""


def _child(section: dict, env_extra: dict | None = None, drop=("JAX_COMPILATION_CACHE_DIR",),
           check=True):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  for name in drop:
    env.pop(name, None)
  env.pop(compile_cache.ENV, None)
  env.update(env_extra or {})
  proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(section)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  if not check:
    return proc
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_choose_follows_config_then_env_then_jax_then_default(tmp_path):
  env = {"HOME": str(tmp_path / "home")}
  assert compile_cache.choose(str(tmp_path / "c"), env).path == str(tmp_path / "c")
  assert compile_cache.choose("", env) == compile_cache.CacheChoice("", "compile.cache_dir",
                                                                    True)
  assert compile_cache.choose("auto", dict(env, RL_POST_COMPILE_CACHE="/x")).path == "/x"
  assert compile_cache.choose("auto", dict(env, RL_POST_COMPILE_CACHE="")).path == ""
  assert compile_cache.choose("auto", env, jax_dir="/j").path == "/j"
  assert compile_cache.choose("auto", dict(env, XDG_CACHE_HOME="/xdg")).path == (
      "/xdg/rl_post/jax")
  default = compile_cache.choose("auto", {})
  assert not default.explicit
  assert default.path == os.path.join(os.path.expanduser("~"), ".cache", "rl_post", "jax")


def test_bad_section_values_are_named():
  with pytest.raises(ValueError, match=r"compile.min_compile_s must be a number >= 0"):
    compile_cache.apply({"compile": {"min_compile_s": -1.0}})
  with pytest.raises(ValueError, match=r"compile: unknown field\(s\) \['dir'\]"):
    compile_cache.apply({"compile": {"dir": "/tmp"}})


def test_check_writable(tmp_path):
  assert compile_cache.check_writable(str(tmp_path / "new" / "deeper")) is None
  assert os.path.isdir(tmp_path / "new" / "deeper")
  (tmp_path / "file").write_text("x")
  assert compile_cache.check_writable(str(tmp_path / "file")) == "is a file, not a directory"


def test_a_second_process_loads_the_program_from_the_configured_dir(tmp_path):
  cache = tmp_path / "cache"
  first = _child(dict(cache_dir=str(cache)))
  assert first["path"] == str(cache) and first["hits"] == 0
  assert any(name.endswith("-cache") for name in os.listdir(cache)), os.listdir(cache)
  second = _child(dict(cache_dir=str(cache)))
  assert second["hits"] >= 1
  assert second["value"] == first["value"]


def test_the_environment_variable_places_it_and_empty_turns_it_off(tmp_path):
  cache = tmp_path / "from_env"
  _child(dict(cache_dir="auto"), {compile_cache.ENV: str(cache)})
  assert _child(dict(cache_dir="auto"), {compile_cache.ENV: str(cache)})["hits"] >= 1
  # off: no directory is used, nothing is loaded, even with JAX's own variable set
  jax_dir = tmp_path / "jax_env"
  for _ in range(2):
    off = _child(dict(cache_dir=""), {"JAX_COMPILATION_CACHE_DIR": str(jax_dir)}, drop=())
    assert off == dict(off, path="", hits=0)
  assert not jax_dir.exists() or not os.listdir(jax_dir)


def test_the_default_dir_is_under_the_users_cache_home(tmp_path):
  out = _child(dict(cache_dir="auto"), {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
  assert out["path"] == str(tmp_path / "xdg" / "rl_post" / "jax")
  assert os.listdir(out["path"])


def test_a_named_bad_directory_is_a_user_error(tmp_path):
  (tmp_path / "file").write_text("x")
  with pytest.raises(ConfigError, match=r"compile.cache_dir=.*file.*is a file, not a directory"
                     r".*compile.cache_dir=''"):
    compile_cache.apply({"compile": {"cache_dir": str(tmp_path / "file")}})
  proc = _child(dict(cache_dir="auto"), {compile_cache.ENV: str(tmp_path / "file" / "sub")},
                check=False)
  assert proc.returncode != 0
  assert "$RL_POST_COMPILE_CACHE" in proc.stderr and "cannot be made or written" in proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_an_unwritable_default_dir_warns_and_runs_without_a_cache(tmp_path):
  xdg = tmp_path / "xdg"
  xdg.mkdir()
  xdg.chmod(0o500)
  try:
    proc = _child(dict(cache_dir="auto"), {"XDG_CACHE_HOME": str(xdg)}, check=False)
  finally:
    xdg.chmod(0o700)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout.strip().splitlines()[-1])["path"] == ""
  assert "running without one" in proc.stderr


def test_entry_points_report_a_bad_cache_dir_as_one_line(tmp_path):
  (tmp_path / "file").write_text("x")
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, "experiments/train_rl.py", "--config=configs/grpo_arithmetic.py:tiny",
       f"--workdir={tmp_path / 'run'}", f"--config.compile.cache_dir={tmp_path / 'file'}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      f"error: compile.cache_dir={str(tmp_path / 'file')!r}: is a file, not a directory: point "
      "it at a writable directory, or set compile.cache_dir='' to compile without a cache")
