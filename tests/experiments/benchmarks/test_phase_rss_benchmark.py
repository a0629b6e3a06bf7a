"""experiments/benchmarks/phase_rss.py: its rows and the wrapping of a trainer phase."""

import os
import types

import jax.numpy as jnp
import pytest

from experiments.benchmarks import phase_rss

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"),
                                reason="reads /proc/self/status")


def test_a_wrapped_phase_marks_a_row_with_its_live_arrays():
  rec = phase_rss.Recorder(interval_s=0.01)
  module = types.SimpleNamespace(load=lambda n: jnp.ones((n,), jnp.float32))
  phase_rss._after(module, "load", rec, "loaded", before="loading")
  kept = module.load(1 << 20)  # 4 MiB
  before, after = rec.rows
  assert (before["phase"], after["phase"]) == ("loading", "loaded")
  assert after["live_bytes"] - before["live_bytes"] == kept.nbytes
  assert 0 < after["rss"] <= after["phase_peak"] <= rec.peak
