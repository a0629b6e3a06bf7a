"""Run with 8 fake CPU devices: the model with ring attention over `context`
equals the single-device model, forward and through a GRPO update.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/parallel/context_parallel_check.py

Prints one JSON object; tests/parallel/test_context_parallel.py checks the numbers.
"""

import dataclasses
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
                            num_kv_heads=2, head_dim=8, mlp_dim=64, attention_impl="xla")
RULES = sharding.DEFAULT_RULES


def _batch(n=4, t=32):
  rng = np.random.default_rng(0)
  tokens = rng.integers(4, CONFIG.vocab_size, (n, t)).astype(np.int32)
  mask = np.zeros((n, t), np.int32)
  mask[:, 9:] = 1
  return dict(tokens=tokens, mask=mask, old_logp=np.full((n, t), -4.0, np.float32) * mask,
              adv=(rng.normal(size=(n, 1)) * mask).astype(np.float32))


def _run(mesh, config):
  cp_mesh = mesh_lib.context_mesh(mesh)
  optimizer = make_optimizer(OptimizerConfig(learning_rate=1e-3))
  rl = RLConfig(batch_size=2, num_generations=2)
  state = state_lib.create_train_state(config, optimizer, mesh, RULES, jax.random.key(0))
  shardings = state_lib.state_shardings(config, optimizer, mesh, RULES)
  batch = _batch()
  batch_sh = {k: sharding.batch_sharding(mesh, RULES, v.ndim) for k, v in batch.items()}
  with jax.set_mesh(mesh):
    logits = jax.jit(lambda p, t: models.apply(config, p, t, context_mesh=cp_mesh))(
        state.params, jax.device_put(batch["tokens"], batch_sh["tokens"]))
    step = jit_train_step(make_rl_train_step(config, rl, optimizer, context_mesh=cp_mesh), shardings, batch_sh)
    state, metrics = step(state, jax.device_put(batch, batch_sh))
  return np.asarray(logits), jax.device_get(state.params), float(metrics["loss"])


def _max_diff(a, b):
  return float(max(jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max(), a, b))))


def main():
  assert jax.device_count() == 8, "run with --xla_force_host_platform_device_count=8"
  single = mesh_lib.make_mesh({"data": 1}, devices=jax.devices()[:1])
  logits_1, params_1, loss_1 = _run(single, CONFIG)
  report = {"single_loss": loss_1}
  for layout in ("zigzag", "striped"):
    mesh = mesh_lib.make_mesh({"data": 2, "context": 4})
    logits_n, params_n, loss_n = _run(mesh, dataclasses.replace(CONFIG, context_layout=layout))
    report[layout] = {"logits_max_diff": float(np.abs(logits_1 - logits_n).max()),
                      "params_after_step_max_diff": _max_diff(params_1, params_n),
                      "loss": loss_n}
  print(json.dumps(report))


if __name__ == "__main__":
  main()
