"""An episode batch killed with SIGKILL resumes from its last turn with the same results."""

import os
import signal
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD = os.path.join(ROOT, "tests", "envs", "resume_child.py")


def _run(*args):
  return subprocess.run([sys.executable, CHILD, *map(str, args)], capture_output=True,
                        text=True, timeout=600, env=dict(os.environ, PYTHONPATH=ROOT))


def test_kill_minus_nine_then_resume_equals_uninterrupted(tmp_path):
  straight = _run(tmp_path / "straight.npz")
  assert straight.returncode == 0, straight.stderr[-3000:]
  ckpt = tmp_path / "batch.ckpt"
  killed = _run(tmp_path / "never.npz", ckpt, 2)
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
  assert ckpt.exists() and not (tmp_path / "never.npz").exists()
  resumed = _run(tmp_path / "resumed.npz", ckpt)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert not ckpt.exists()  # removed once the batch completed
  a, b = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
  assert a["turns"].max() >= 3  # the kill came mid-batch, after two resumes
  for key in ("tokens", "loss_mask", "mask", "rewards", "turns", "calls", "transcripts"):
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  np.testing.assert_allclose(a["logp"], b["logp"], atol=1e-5)
