"""XLA flags of the test suite, and of the processes its tests start.

XLA's CPU backend spends most of a tiny model's compile in LLVM's optimiser;
the suite compiles hundreds of programs and runs each a few times, so it asks
for unoptimised machine code. The HLO passes (fusion, sharding, buffer
assignment, hence every memory figure) are unchanged. tests/conftest.py adds
the flags to the suite's own environment; a test that starts a process gives
it `xla_flags(devices)` in place of whatever XLA_FLAGS the caller had, so a
forced device count of the parent never leaks into the child.
"""

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def xla_flags(devices: int | None = None) -> str:
  """The suite's flags, with `devices` fake host devices when given."""
  if devices is None:
    return TEST_XLA_FLAGS
  return f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}"
