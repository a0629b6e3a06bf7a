"""Context parallelism: layouts in-process, ring numerics in a subprocess."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from rl_post.parallel import ring_attention as ra

_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_zigzag_balances_causal_work():
  perm = ra.zigzag_permutation(16, 4)
  np.testing.assert_array_equal(perm[:4], [0, 1, 14, 15])
  shards = perm.reshape(4, 4)
  # Causal work of a token ~ its position: equal on every shard.
  assert len(set((shards + 1).sum(1))) == 1
  np.testing.assert_array_equal(np.sort(perm), np.arange(16))


def test_striped_and_inverse():
  perm = ra.striped_permutation(8, 4)
  np.testing.assert_array_equal(perm, [0, 4, 1, 5, 2, 6, 3, 7])
  x = np.arange(8) * 10
  np.testing.assert_array_equal(x[perm][ra.inverse_permutation(perm)], x)


def test_bad_layouts():
  with pytest.raises(ValueError, match="divisible by 2 \\* n_shards"):
    ra.zigzag_permutation(12, 4)
  with pytest.raises(ValueError, match="layout must be one of"):
    ra.layout_permutation("spiral", 16, 4)


def test_ring_attention_on_8_devices_matches_reference():
  env = dict(os.environ, PYTHONPATH=str(_ROOT) + os.pathsep +
             os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, str(pathlib.Path(__file__).with_name(
          "ring_attention_check.py"))],
      env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert proc.stdout.count("ok ") == 2, proc.stdout
