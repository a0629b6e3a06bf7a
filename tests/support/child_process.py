"""Processes the tests start: their XLA flags, and a script run for its JSON report.

XLA's CPU backend spends most of a tiny model's compile in LLVM's optimiser;
the suite compiles hundreds of programs and runs each a few times, so it asks
for unoptimised machine code. The HLO passes (fusion, sharding, buffer
assignment, hence every memory figure) are unchanged. tests/conftest.py adds
the flags to the suite's own environment; a test that starts a process gives
it `xla_flags(devices)` in place of whatever XLA_FLAGS the caller had, so a
forced device count of the parent never leaks into the child.
"""

import json
import os
import subprocess
import sys

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def xla_flags(devices: int | None = None) -> str:
  """The suite's flags, with `devices` fake host devices when given."""
  if devices is None:
    return TEST_XLA_FLAGS
  return f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}"


def json_report(script: str, *args: str, devices: int = 8, timeout: int = 600) -> dict:
  """Runs `script` (a path) on `devices` fake host devices; returns the JSON object
  its last line of output prints. Fails the test with its stderr when it fails."""
  env = dict(os.environ, XLA_FLAGS=xla_flags(devices),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, script, *args], env=env, capture_output=True,
                       text=True, timeout=timeout)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def json_reports(runs, timeout: int = 600) -> list[dict]:
  """`json_report` for several (script, args, devices) at once, each in its own
  process started before any is awaited; their reports in the same order."""
  procs = []
  for script, args, devices in runs:
    env = dict(os.environ, XLA_FLAGS=xla_flags(devices),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs.append(subprocess.Popen([sys.executable, script, *args], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE))
  outs = [p.communicate(timeout=timeout) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
