"""The host memory policy: XLA:CPU's per-call temp buffer is reused, not page-faulted anew."""

import json
import os
import subprocess
import sys

import pytest

from rl_post.training import host_memory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A program whose temp buffer (the [4096, 4096] f32 product (x @ w): 64 MiB) is above
# glibc's largest mmap threshold (32 MiB); prints page faults per call. Pinned
# to one core: unpinned, XLA's threads sometimes free a call's temp buffer
# after the next call took a new one, and a few calls fault again.
_PROBE = r"""
import json, os, resource, sys
os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # one core: threads free in order
from rl_post.training import host_memory
applied = host_memory.apply_policy()
import jax, jax.numpy as jnp
f = jax.jit(lambda x, w, v: (x @ w) @ v)
x, w, v = (jnp.ones(s, jnp.float32) for s in ((4096, 64), (64, 4096), (4096, 8)))
temp = f.lower(x, w, v).compile().memory_analysis().temp_size_in_bytes
faults = []
for _ in range(10):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  jax.block_until_ready(f(x, w, v))
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
faults = sorted(faults)[len(faults) // 2]  # the median call's (the first calls grow the heap)
late = host_memory.retain_freed_memory() if os.environ.get("LATE") else None
print(json.dumps(dict(applied=applied, temp=temp, faults=faults, late=late)))
"""


def _probe(policy: str, **env) -> dict:
  proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
                                              RL_POST_HOST_MALLOC=policy, **env))
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(host_memory._glibc() is None, reason="the policy is glibc's mallopt")
def test_retain_stops_the_per_call_page_faults():
  system, retain = _probe("system"), _probe("auto", LATE="1")
  page = os.sysconf("SC_PAGE_SIZE")
  assert system["temp"] > 32 << 20
  assert system["applied"] == dict(policy="system", applied=False, reason="malloc left alone")
  # without the policy every call faults its temp buffer in page by page
  assert system["faults"] > 0.5 * system["temp"] / page
  assert retain["applied"]["applied"] and retain["applied"]["policy"] == "auto"
  assert retain["faults"] < 0.02 * system["faults"]
  # a second call after the backend started is a no-op that says it applied already
  assert retain["late"]["applied"]


def test_too_late_once_the_backend_started():
  proc = subprocess.run(
      [sys.executable, "-c", "import json, jax; jax.devices(); from rl_post.training import "
       "host_memory as h; print(json.dumps(h.retain_freed_memory()))"],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert not result["applied"]
  assert result["reason"] in ("the XLA backend already started; call this first", "not glibc")


@pytest.mark.parametrize("value, expected", [("", "auto"), ("auto", "auto"), (" Retain ", "retain"),
                                             ("system", "system")])
def test_policy_from_env(value, expected):
  assert host_memory.policy_from_env({host_memory.ENV: value}) == expected


def test_glibc_tunables_name_the_same_settings():
  assert host_memory.glibc_tunables() == ("glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                                          "glibc.malloc.trim_threshold=1073741824")


def test_unknown_policy_is_a_clear_error():
  with pytest.raises(ValueError, match=r"RL_POST_HOST_MALLOC='sometimes': must be one of"):
    host_memory.policy_from_env({host_memory.ENV: "sometimes"})


def test_auto_follows_the_platform(monkeypatch):
  monkeypatch.setattr(host_memory, "jax_platforms", lambda environ=None: "tpu,cpu")
  assert not host_memory.runs_on_cpu()
  assert host_memory.apply_policy({host_memory.ENV: "auto"}) == dict(
      policy="auto", applied=False, reason="malloc left alone")
  monkeypatch.setattr(host_memory, "jax_platforms", lambda environ=None: "cpu")
  assert host_memory.runs_on_cpu()
  monkeypatch.setattr(host_memory, "jax_platforms", lambda environ=None: "")
  monkeypatch.setattr(host_memory, "accelerator_plugin_installed", lambda: True)
  assert not host_memory.runs_on_cpu()


def test_entry_point_rejects_an_unknown_policy():
  proc = subprocess.run([sys.executable, "experiments/build_tokenizer.py", "--helpfull"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
                                 RL_POST_HOST_MALLOC="sometimes"))
  assert proc.returncode == 2, proc.stderr
  assert "Traceback" not in proc.stderr
  assert [line for line in proc.stderr.splitlines() if line.startswith("error: ")] == [
      "error: RL_POST_HOST_MALLOC='sometimes': must be one of ('auto', 'retain', 'system')"]


def test_release_free_memory_returns_the_heaps_free_pages():
  # glibc (this suite's Linux): malloc_trim runs and says so; nothing in use is touched
  import numpy as np
  kept = np.arange(1000.0)
  assert host_memory.release_free_memory() is True
  assert kept.sum() == 499500.0
