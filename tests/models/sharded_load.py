"""Run with 8 fake CPU devices: `hf.load` onto a 2x2x2 mesh equals the saved params.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/models/sharded_load.py DIR

Prints one JSON object; tests/models/test_hf_sharded.py checks it.
"""

import dataclasses
import json
import sys

import jax
import numpy as np

from rl_post import models
from rl_post.models import hf
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.training import state as state_lib

CONFIG = models.ModelConfig(vocab_size=64, num_layers=2, embed_dim=32, num_heads=4,
                            num_kv_heads=2, head_dim=8, mlp_dim=64, qkv_bias=True,
                            tie_embeddings=False, attention_impl="xla")


def main(directory):
  rng = np.random.default_rng(0)  # numpy: init_params compiles one program per param
  params = jax.tree.map(lambda a: (0.1 * rng.standard_normal(a.shape)).astype(np.float32),
                        models.abstract_params(CONFIG))
  hf.save(directory, CONFIG, params, max_shard_bytes=20_000)
  mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  config, loaded = hf.load(directory, mesh=mesh)
  want = state_lib.param_shardings(config, mesh, sharding.DEFAULT_RULES)
  same_sharding = all(jax.tree.leaves(jax.tree.map(
      lambda a, s: a.sharding.is_equivalent_to(s, a.ndim), loaded, want)))
  max_diff = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                 for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)))
  q = loaded["blocks"]["attn"]["q_proj"]
  tokens = np.arange(24, dtype=np.int32).reshape(2, 12) % CONFIG.vocab_size
  with jax.set_mesh(mesh):
    logits_mesh = np.asarray(jax.jit(lambda p, t: models.apply(config, p, t))(loaded, tokens))
  logits_single = np.asarray(models.apply(config, params, tokens))
  print(json.dumps({
      # attention_impl is not part of a HF checkpoint: it loads as "auto"
      "config_equal": config == dataclasses.replace(CONFIG, attention_impl="auto"),
      "same_sharding": bool(same_sharding),
      "params_max_diff": max_diff,
      "q_proj_shard_shape": list(q.addressable_shards[0].data.shape),
      "q_proj_shape": list(q.shape),
      "logits_max_diff": float(np.abs(logits_mesh - logits_single).max())}))


if __name__ == "__main__":
  main(sys.argv[1])
