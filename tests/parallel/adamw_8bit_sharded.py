"""Run with 8 fake CPU devices: 8-bit AdamW on a 2x2x2 mesh against one device.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/parallel/adamw_8bit_sharded.py

Two RL train steps of the tiny model of tests/parallel/sharded_equivalence.py with
`optimizer.state_dtype="int8"`, sharded and on one device; prints one JSON
object with the differences and the moments' observed shardings
(tests/training/test_adamw_8bit.py checks them).
"""

import json

import jax
import numpy as np

from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import sharding
from rl_post.rl.config import RLConfig
from rl_post.rl.train_step import make_rl_train_step
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.step import jit_train_step
from sharded_equivalence import CONFIG, RULES, _batch, _max_diff


def _run(mesh):
  optimizer = make_optimizer(OptimizerConfig(learning_rate=1e-2, state_dtype="int8"))
  state = state_lib.create_train_state(CONFIG, optimizer, mesh, RULES, jax.random.key(0))
  shardings = state_lib.state_shardings(CONFIG, optimizer, mesh, RULES)
  batch = _batch()
  batch_sh = {k: sharding.batch_sharding(mesh, RULES, v.ndim) for k, v in batch.items()}
  params0 = jax.device_get(state.params)
  step = jit_train_step(make_rl_train_step(CONFIG, RLConfig(batch_size=2, num_generations=4),
                                           optimizer), shardings, batch_sh)
  for _ in range(2):
    state, metrics = step(state, jax.device_put(batch, batch_sh))
  return params0, jax.device_get(state.params), jax.device_get(metrics), state


def main():
  assert jax.device_count() == 8, "run with --xla_force_host_platform_device_count=8"
  single = mesh_lib.make_mesh({"data": 1}, devices=jax.devices()[:1])
  mesh = mesh_lib.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  p0, p_single, m_single, s_single = _run(single)
  _, p_mesh, m_mesh, s_mesh = _run(mesh)
  gate_mu = s_mesh.opt_state[1][0].mu["blocks"]["mlp"]["gate"]
  gate_param = s_mesh.params["blocks"]["mlp"]["gate"]
  codes_single = s_single.opt_state[1][0].mu["blocks"]["mlp"]["gate"].codes
  print(json.dumps({
      "params_after_2_steps_max_diff": _max_diff(p_single, p_mesh),
      "param_change": _max_diff(p0, p_single),
      "loss_single": float(m_single["loss"]), "loss_mesh": float(m_mesh["loss"]),
      "gate_param_spec": [str(a) for a in gate_param.sharding.spec],
      "gate_codes_spec": [str(a) for a in gate_mu.codes.sharding.spec],
      "gate_codes_dtype": str(gate_mu.codes.dtype),
      "gate_scales_shape": list(gate_mu.scales.shape),
      "gate_scales_spec": [str(a) for a in gate_mu.scales.sharding.spec],
      "gate_codes_equal_fraction": float(np.mean(np.asarray(codes_single)
                                                 == np.asarray(gate_mu.codes))),
  }))


if __name__ == "__main__":
  main()
