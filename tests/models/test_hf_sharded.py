"""`hf.load` onto a mesh of 8 fake CPU devices (run in a subprocess)."""

import json
import os
import subprocess
import sys

from xla_test_flags import xla_flags

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_load_places_each_param_in_its_sharding(tmp_path):
  env = dict(os.environ, XLA_FLAGS=xla_flags(8),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, os.path.join(HERE, "sharded_load.py"), str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  report = json.loads(out.stdout.strip().splitlines()[-1])
  assert report["config_equal"] and report["same_sharding"]
  assert report["params_max_diff"] == 0.0
  # q_proj [L, E, H, D] is split (None, fsdp, tensor, None): each device holds a quarter
  layers, embed, heads, head_dim = report["q_proj_shape"]
  assert report["q_proj_shard_shape"] == [layers, embed // 2, heads // 2, head_dim]
  assert report["logits_max_diff"] < 1e-5
