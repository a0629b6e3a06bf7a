"""Run with 8 fake CPU devices: sharded generation must equal one device.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/sampling/sharded_generation.py

Prints one JSON object; tests/sampling/test_sharded_generation.py checks it.
"""

import json

import jax
import numpy as np

from rl_post import models
from rl_post.models import kv_cache
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.models.logprobs import sequence_logprobs
from rl_post.sampling.sampler import SamplingConfig, generate
from rl_post.sampling.sharded import ShardedRollout

CONFIG = models.ModelConfig(vocab_size=64, num_layers=2, embed_dim=32, num_heads=4,
                            num_kv_heads=2, head_dim=8, mlp_dim=64, qkv_bias=True,
                            tie_embeddings=False, attention_impl="xla")
SAMPLING = SamplingConfig(max_new_tokens=10, greedy=True, length_buckets=(8,))


def main():
  assert jax.device_count() == 8, "run with --xla_force_host_platform_device_count=8"
  params = models.init_params(CONFIG, jax.random.key(0))
  rng = np.random.default_rng(0)
  prompts = np.repeat(rng.integers(1, 64, (4, 8)), 2, axis=0).astype(np.int32)
  lens = np.repeat(np.array([8, 3, 5, 1]), 2).astype(np.int32)
  seeds = np.arange(8, dtype=np.int32)
  single = jax.device_get(generate(params, prompts, lens, None, seeds_B=seeds,
                                   model_config=CONFIG, config=SAMPLING, eos_id=None, pad_id=0,
                                   group_size=2))
  single_logp, _ = sequence_logprobs(CONFIG, params, single.tokens_BxT)
  mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  engine = ShardedRollout(CONFIG, SAMPLING, mesh, sharding.DEFAULT_RULES,
                          capacity=8 + SAMPLING.max_new_tokens, group_size=2)
  sharded_params = jax.device_put(params, engine.params_sharding)
  rollout, state = engine.generate(sharded_params, prompts, lens, seeds)
  cache_k = state.caches[0]["k"]
  ref_logp, _ = engine.logprobs(sharded_params, jax.device_put(
      np.asarray(rollout.tokens_BxT), engine.row_t_sharding))
  mask = single.loss_mask_BxT.astype(bool)
  print(json.dumps({
      "tokens_equal": bool(np.array_equal(np.asarray(rollout.tokens_BxT), single.tokens_BxT)),
      "sampled": int(mask.sum()),
      "logp_max_diff": float(np.abs(np.asarray(rollout.logp_BxT) - single.logp_BxT).max()),
      "ref_logp_max_diff": float(np.abs(np.where(mask, np.asarray(ref_logp) - single_logp,
                                                 0.0)).max()),
      "cache_layout": kv_cache.layout(CONFIG),
      "cache_spec": [str(a) for a in cache_k.sharding.spec],
      "cache_shard_shape": list(cache_k.addressable_shards[0].data.shape),
      "cache_shape": list(cache_k.shape),
      "tokens_spec": [str(a) for a in rollout.tokens_BxT.sharding.spec],
  }))


if __name__ == "__main__":
  main()
