"""Sharded generation on 8 fake CPU devices equals one device (subprocess)."""

import json
import os
import subprocess
import sys

from xla_test_flags import xla_flags

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sharded_generation_equals_single_device():
  env = dict(os.environ, XLA_FLAGS=xla_flags(8),
             PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, os.path.join(HERE, "sharded_generation.py")],
                       env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  report = json.loads(out.stdout.strip().splitlines()[-1])
  assert report["sampled"] >= 40
  assert report["tokens_equal"], report
  assert report["logp_max_diff"] < 1e-5 and report["ref_logp_max_diff"] < 1e-5, report
  # batch over (data, fsdp), kv heads over tensor: each device holds 1/8 of the cache
  # (on CPU the k cache is [B, K, D, S]: `rl_post.models.kv_cache`)
  assert report["cache_layout"] == "transposed", report
  assert report["cache_spec"][0] in ("('data', 'fsdp')", "data fsdp") or "data" in report[
      "cache_spec"][0], report
  assert report["cache_spec"][1] == "tensor", report
  b, k, d, s = report["cache_shape"]
  assert report["cache_shard_shape"] == [b // 4, k // 2, d, s]
