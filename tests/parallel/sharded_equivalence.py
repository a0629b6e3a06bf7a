"""Run with 8 fake CPU devices: sharded results must equal single-device ones.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/parallel/sharded_equivalence.py

Prints one JSON object with the measured differences and the observed
parameter shardings; tests/parallel/test_sharding.py runs it in a subprocess and
checks the numbers.
"""

import json

import jax
import numpy as np

from rl_post import models
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rl.config import RLConfig
from rl_post.rl.train_step import make_rl_train_step
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.step import jit_train_step

CONFIG = models.ModelConfig(vocab_size=64, num_layers=2, embed_dim=32, num_heads=4,
                            num_kv_heads=2, head_dim=8, mlp_dim=64, qkv_bias=True,
                            tie_embeddings=False, attention_impl="xla")
RULES = sharding.DEFAULT_RULES


def _batch(n=8, t=12):
  rng = np.random.default_rng(0)
  tokens = rng.integers(4, CONFIG.vocab_size, (n, t)).astype(np.int32)
  mask = np.zeros((n, t), np.int32)
  mask[:, 5:] = 1
  return dict(tokens=tokens, mask=mask, old_logp=np.full((n, t), -4.0, np.float32) * mask,
              adv=(rng.normal(size=(n, 1)) * mask).astype(np.float32))


def _run(mesh):
  optimizer = make_optimizer(OptimizerConfig(learning_rate=1e-2))
  rl = RLConfig(batch_size=2, num_generations=4)
  state = state_lib.create_train_state(CONFIG, optimizer, mesh, RULES, jax.random.key(0))
  shardings = state_lib.state_shardings(CONFIG, optimizer, mesh, RULES)
  batch = _batch()
  batch_sh = {k: sharding.batch_sharding(mesh, RULES, v.ndim) for k, v in batch.items()}
  params0 = jax.device_get(state.params)
  logits = jax.jit(lambda p, t: models.apply(CONFIG, p, t))(
      state.params, jax.device_put(batch["tokens"], batch_sh["tokens"]))
  step = jit_train_step(make_rl_train_step(CONFIG, rl, optimizer), shardings, batch_sh)
  state, metrics = step(state, jax.device_put(batch, batch_sh))
  state, metrics = step(state, jax.device_put(batch, batch_sh))
  return params0, np.asarray(logits), jax.device_get(state.params), jax.device_get(metrics), state


def _max_diff(a, b):
  return float(max(jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max(), a, b))))


def main():
  assert jax.device_count() == 8, "run with --xla_force_host_platform_device_count=8"
  single = mesh_lib.make_mesh({"data": 1}, devices=jax.devices()[:1])
  mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  p0_single, logits_single, p_single, m_single, _ = _run(single)
  p0_mesh, logits_mesh, p_mesh, m_mesh, state = _run(mesh)
  q_proj = state.params["blocks"]["attn"]["q_proj"]
  embedding = state.params["embed"]["embedding"]
  mu = state.opt_state[1][0].mu["blocks"]["mlp"]["gate"]
  print(json.dumps({
      "init_max_diff": _max_diff(p0_single, p0_mesh),
      "logits_max_diff": float(np.abs(logits_single - logits_mesh).max()),
      "params_after_2_steps_max_diff": _max_diff(p_single, p_mesh),
      "loss_single": float(m_single["loss"]), "loss_mesh": float(m_mesh["loss"]),
      "param_change": _max_diff(p0_single, p_single),
      "q_proj_spec": [str(a) for a in q_proj.sharding.spec],
      "q_proj_shape": list(q_proj.shape),
      "q_proj_shard_shape": list(q_proj.addressable_shards[0].data.shape),
      "q_proj_num_distinct_shards": len({tuple((i.start, i.stop) for i in s.index)
                                         for s in q_proj.addressable_shards}),
      "embedding_spec": [str(a) for a in embedding.sharding.spec],
      "embedding_shard_shape": list(embedding.addressable_shards[0].data.shape),
      "adam_mu_gate_spec": [str(a) for a in mu.sharding.spec],
  }))


if __name__ == "__main__":
  main()
