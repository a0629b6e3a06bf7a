"""Sharded generation on 8 fake CPU devices equals one device (subprocess)."""

import os

from child_process import json_report

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sharded_generation_equals_single_device():
  report = json_report(os.path.join(HERE, "sharded_generation.py"))
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
