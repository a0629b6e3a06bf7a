"""Sharded (2x2x2 mesh of fake CPU devices) == single device, and rules apply."""

import os

import pytest
from jax.sharding import PartitionSpec

from child_process import json_report
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def report():
  return json_report(os.path.join(HERE, "sharded_equivalence.py"))


def test_sharded_forward_and_train_step_equal_single_device(report):
  assert report["init_max_diff"] == 0.0
  assert report["logits_max_diff"] < 1e-5
  assert report["param_change"] > 1e-3  # the steps really moved the params
  # Adam divides by sqrt(v): float reduction-order noise in the gradients is
  # amplified to ~1e-5 in the params, against a change of ~2e-2.
  assert report["params_after_2_steps_max_diff"] < 1e-4
  assert abs(report["loss_single"] - report["loss_mesh"]) < 1e-5


def test_parameters_are_split_as_the_rules_say(report):
  # q_proj [layers, embed, heads, head_dim] -> (None, fsdp, tensor, None)
  assert report["q_proj_spec"] == ["None", "fsdp", "tensor", "None"]
  layers, embed, heads, head_dim = report["q_proj_shape"]
  assert report["q_proj_shard_shape"] == [layers, embed // 2, heads // 2, head_dim]
  assert report["q_proj_num_distinct_shards"] == 4  # 2 (fsdp) x 2 (tensor), replicated on data
  assert report["embedding_spec"] == ["tensor", "fsdp"]
  assert report["adam_mu_gate_spec"] == ["None", "fsdp", "tensor"]  # moments follow params


def test_rules_and_mesh_errors():
  names = mesh_lib.MESH_AXES
  assert sharding.logical_to_spec(("batch", "embed"), sharding.DEFAULT_RULES, names) == \
      PartitionSpec(("data", "fsdp"), None)  # fsdp already used by batch
  with pytest.raises(ValueError, match="names mesh axis 'model'"):
    sharding.logical_to_spec(("embed",), (("embed", "model"),), names)
  with pytest.raises(ValueError, match="logical axis 'experts' has no sharding rule"):
    sharding.logical_to_spec(("experts",), sharding.DEFAULT_RULES, names)
  with pytest.raises(ValueError, match="mesh.data must be a positive int or -1"):
    mesh_lib.resolve_mesh_shape({"data": 0}, 8)
  with pytest.raises(ValueError, match="has 4 devices but 8 are available"):
    mesh_lib.resolve_mesh_shape({"data": 2, "tensor": 2}, 8)
  with pytest.raises(ValueError, match="unknown axes"):
    mesh_lib.resolve_mesh_shape({"expert": 2}, 8)
  assert mesh_lib.resolve_mesh_shape({"data": -1, "tensor": 2}, 8) == \
      {"data": 4, "fsdp": 1, "tensor": 2, "context": 1}
