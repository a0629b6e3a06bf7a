"""`hf.load` onto a mesh of 8 fake CPU devices (run in a subprocess)."""

import os

from child_process import json_report

HERE = os.path.dirname(os.path.abspath(__file__))


def test_load_places_each_param_in_its_sharding(tmp_path):
  report = json_report(os.path.join(HERE, "sharded_load.py"), str(tmp_path))
  assert report["config_equal"] and report["same_sharding"]
  assert report["params_max_diff"] == 0.0
  # q_proj [L, E, H, D] is split (None, fsdp, tensor, None): each device holds a quarter
  layers, embed, heads, head_dim = report["q_proj_shape"]
  assert report["q_proj_shard_shape"] == [layers, embed // 2, heads // 2, head_dim]
  assert report["logits_max_diff"] < 1e-5
