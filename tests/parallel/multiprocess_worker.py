"""One process of a multi-host run on CPU: SFT and GRPO steps on a data x fsdp x tensor mesh.

  python tests/parallel/multiprocess_worker.py --num_processes=2 --process_id=0 \
      --port=12355 --local_devices=4 --out=/tmp/out
  python tests/parallel/multiprocess_worker.py --num_processes=1 --process_id=0 \
      --local_devices=8 --out=/tmp/out

Each process builds only its rows of every batch (`process_data.local_rows`)
and the global batch is assembled with `make_array_from_process_local_data`.
Process 0 writes `<out>/result.npz` (params after the steps, per-step
metrics); tests/parallel/test_multiprocess.py compares the 2 x 4 and 1 x 8 runs.
"""

import argparse
import os

import numpy as np


def _args():
  p = argparse.ArgumentParser()
  p.add_argument("--num_processes", type=int, required=True)
  p.add_argument("--process_id", type=int, required=True)
  p.add_argument("--port", type=int, default=0)
  p.add_argument("--local_devices", type=int, required=True)
  p.add_argument("--out", required=True)
  p.add_argument("--hf_dir", default="", help="a saved HF checkpoint to load onto the mesh")
  return p.parse_args()


def _global_batch(step: int, rows: int, t: int, vocab: int) -> dict:
  """The whole batch of `step`; a process keeps only its rows (like tasks by (seed, step))."""
  rng = np.random.default_rng(step)
  tokens = rng.integers(4, vocab, (rows, t)).astype(np.int32)
  mask = np.zeros((rows, t), np.int32)
  mask[:, t // 2:] = 1
  return dict(tokens=tokens, mask=mask,
              old_logp=(rng.normal(size=(rows, t)) * 0.1 - 4.0).astype(np.float32) * mask,
              adv=(rng.normal(size=(rows, 1)) * mask).astype(np.float32))


def hf_tokens(vocab: int):
  """The [8, 12] batch the HF import check runs (the test recomputes it)."""
  return (np.arange(8 * 12).reshape(8, 12) * 7 % vocab).astype(np.int32)


def _hf_import(hf_dir, mesh, rules, rows) -> dict:
  """Loads a HF checkpoint onto the (multi-process) mesh; logits of `hf_tokens`."""
  import dataclasses
  import jax
  from rl_post import models
  from rl_post.models import hf
  from rl_post.parallel import process_data, sharding
  config, params = hf.load(hf_dir, mesh=mesh, rules=rules)
  config = dataclasses.replace(config, attention_impl="xla")
  tokens = hf_tokens(config.vocab_size)
  tokens = process_data.global_batch(tokens[rows], sharding.batch_sharding(mesh, rules, 2), 8)
  logits = jax.jit(lambda p, t: models.apply(config, p, t))(params, tokens)
  embed = params["embed"]["embedding"]
  return {"hf/logits": process_data.fetch(logits),
          "hf/embed_fully_addressable": np.asarray(embed.is_fully_addressable),
          "hf/embed_local_shards": np.asarray(len(embed.addressable_shards))}


def main():
  a = _args()
  import jax
  jax.config.update("jax_num_cpu_devices", a.local_devices)
  jax.config.update("jax_numpy_rank_promotion", "raise")
  from rl_post.parallel import distributed
  if a.num_processes > 1:
    distributed.initialize(dict(mode="explicit", coordinator_address=f"localhost:{a.port}",
                                num_processes=a.num_processes, process_id=a.process_id,
                                timeout_s=60))
  from rl_post import models
  from rl_post.parallel import mesh as mesh_lib
  from rl_post.parallel import process_data, sharding
  from rl_post.rl.config import RLConfig
  from rl_post.rl.train_step import make_rl_train_step
  from rl_post.sft.trainer import make_sft_loss
  from rl_post.training import state as state_lib
  from rl_post.training.optimizer import OptimizerConfig, make_optimizer
  from rl_post.training.step import jit_train_step, make_train_step

  assert jax.process_count() == a.num_processes and jax.device_count() == 8
  config = models.ModelConfig(vocab_size=64, num_layers=2, embed_dim=32, num_heads=4,
                              num_kv_heads=2, head_dim=8, mlp_dim=64, attention_impl="xla")
  rules = sharding.DEFAULT_RULES
  mesh = mesh_lib.make_mesh(dict(data=2, fsdp=2, tensor=2))
  optimizer = make_optimizer(OptimizerConfig(learning_rate=1e-2, schedule="constant"))
  shardings = state_lib.state_shardings(config, optimizer, mesh, rules)
  rows_global, t = 8, 12
  result = {}
  for name, step_fn in (
      ("sft", make_train_step(make_sft_loss(config), optimizer)),
      ("grpo", make_rl_train_step(config, RLConfig(batch_size=2, num_generations=4),
                                  optimizer))):
    keys = ("tokens", "mask") if name == "sft" else ("tokens", "mask", "old_logp", "adv")
    batch_sh = {k: sharding.batch_sharding(mesh, rules, 2) for k in keys}
    rows = process_data.local_rows(batch_sh["tokens"], rows_global)
    jitted = jit_train_step(step_fn, shardings, batch_sh)
    state = state_lib.create_train_state(config, optimizer, mesh, rules, jax.random.key(0))
    for step in range(2):
      full = _global_batch(step, rows_global, t, config.vocab_size)
      local = {k: full[k][rows] for k in keys}  # only this process's rows
      state, metrics = jitted(state, process_data.global_batch(local, batch_sh, rows_global))
      for k, v in metrics.items():
        result[f"{name}/metrics/{k}/{step}"] = np.asarray(float(v))
    params = process_data.fetch(state.params)
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
      result[f"{name}/params/{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
    result[f"{name}/rows/{jax.process_index()}"] = np.asarray([rows.start, rows.stop])
  if a.hf_dir:
    result.update(_hf_import(a.hf_dir, mesh, rules, rows))
  all_rows = process_data.fetch(np.asarray([rows.start, rows.stop])[None])
  result["rows"] = np.asarray(all_rows)
  if distributed.is_primary():
    os.makedirs(a.out, exist_ok=True)
    np.savez(os.path.join(a.out, "result.npz"), **result)
  print(f"process {jax.process_index()} done rows={rows}", flush=True)


if __name__ == "__main__":
  main()
