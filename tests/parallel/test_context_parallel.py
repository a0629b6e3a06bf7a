"""The model with context parallelism (ring attention over a `context` axis
of a 2 (data) x 4 (context) mesh) equals the single-device model."""

import os

import pytest

from child_process import json_report

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def report():
  return json_report(os.path.join(HERE, "context_parallel_check.py"), timeout=900)


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
