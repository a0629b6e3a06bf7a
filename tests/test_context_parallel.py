"""The model with context parallelism (ring attention over a `context` axis
of a 2 (data) x 4 (context) mesh) equals the single-device model."""

import json
import os
import subprocess
import sys

import pytest

from xla_test_flags import xla_flags

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def report():
  env = dict(os.environ, XLA_FLAGS=xla_flags(8),
             PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, os.path.join(HERE, "context_parallel_check.py")],
                       env=env, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("layout", ["zigzag", "striped"])
def test_ring_attention_model_matches_single_device(report, layout):
  r = report[layout]
  assert r["logits_max_diff"] < 1e-5
  assert abs(r["loss"] - report["single_loss"]) < 1e-5
  assert r["params_after_step_max_diff"] < 1e-4  # one Adam step of lr 1e-3 moves params ~1e-3


def test_bad_layout_and_mesh_without_context_axis():
  from rl_post import models
  from rl_post.parallel import mesh as mesh_lib
  config = models.ModelConfig(vocab_size=16, num_layers=1, embed_dim=8, num_heads=2,
                              num_kv_heads=1, head_dim=4, mlp_dim=8)
  with pytest.raises(ValueError, match="model.context_layout must be one of"):
    models.ModelConfig(**{**config.to_dict(), "context_layout": "spiral"})
  assert mesh_lib.context_mesh(mesh_lib.make_mesh({"data": 1})) is None
