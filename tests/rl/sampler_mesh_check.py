"""The RL loop with the sampler on a mesh of its own (`rl.sampler_devices`), run in a
child process with fake CPU devices by tests/rl/test_sampler_mesh.py.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      python tests/rl/sampler_mesh_check.py TOKENIZER WORKDIR split      # 4 trainer + 4 sampler
  XLA_FLAGS=--xla_force_host_platform_device_count=4 \
      python tests/rl/sampler_mesh_check.py TOKENIZER WORKDIR one_mesh   # the same runs, one mesh

Both lay out the tiny digit run (tests/support/digit_runs.py) on data=4 meshes: split,
the trainer on devices 0-3 and the sampler on 4-7; one mesh, both on the 4 devices.
Runs: "sync" (no overlap), "overlap" (rl.overlap_update), "resumed" (the overlap run
stopped after its first checkpoint and run again; split only) and "variants" (LoRA
adapters, a bfloat16 sampler copy, async rewards and the overlap together).
Split also tries settings that must fail ("errors": field and message of each).
Prints one JSON object: per run its metrics rows and its final params as lists.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(os.path.dirname(HERE), "support")
sys.path.insert(0, SUPPORT)
# the reward workers load the digit domain ("rl_fixtures:ContainsDigit") from there too
os.environ["PYTHONPATH"] = os.pathsep.join([SUPPORT, os.environ.get("PYTHONPATH", "")])

import jax  # noqa: E402
import numpy as np  # noqa: E402

from digit_runs import digit_config  # noqa: E402
from rl_post.errors import ConfigError  # noqa: E402
from rl_post.metrics.writers import read_metrics  # noqa: E402
from rl_post.rl import components, trainer  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

VARIANTS = dict(overlap_update=True, async_rewards=True, async_staleness=1,
                rollout_precision="bfloat16", lora=dict(rank=4, alpha=8.0),
                num_steps=3, checkpoint_every=100)


def _run(config, workdir) -> dict:
  out = trainer.train(config, workdir)
  params = {jax.tree_util.keystr(p): np.asarray(x, np.float64).ravel().tolist()
            for p, x in jax.tree_util.tree_flatten_with_path(out["state"].params)[0]}
  return {"rows": read_metrics(workdir), "params": params}


def _error(tok, workdir, mesh=None, **rl) -> dict:
  config = digit_config(tok, **rl)
  if mesh:
    config.mesh = mesh
  try:
    components.RLComponents(config, workdir)
  except ConfigError as e:
    return {"field": e.field, "message": str(e)}
  return {"field": None, "message": "no error"}


def main(tok, root, mode):
  split = dict(sampler_devices=4) if mode == "split" else {}
  report = {"devices": jax.device_count()}
  report["sync"] = _run(digit_config(tok, **split), os.path.join(root, "sync"))
  overlap = digit_config(tok, overlap_update=True, **split)
  report["overlap"] = _run(overlap, os.path.join(root, "overlap"))
  if mode == "split":
    overlap.rl.num_steps = 2  # "crash" after the first checkpoint, then the same command
    trainer.train(overlap, os.path.join(root, "resumed"))
    overlap.rl.num_steps = 4
    report["resumed"] = _run(overlap, os.path.join(root, "resumed"))
  report["variants"] = _run(digit_config(tok, **VARIANTS, **split),
                            os.path.join(root, "variants"))
  if mode == "split":
    report["errors"] = {
        "all_devices": _error(tok, os.path.join(root, "e1"), sampler_devices=8),
        "fixed_mesh": _error(tok, os.path.join(root, "e2"), sampler_devices=4,
                             mesh=dict(data=8, fsdp=1, tensor=1, context=1)),
        "model_split": _error(tok, os.path.join(root, "e3"), sampler_devices=6,
                              mesh=dict(data=1, fsdp=-1, tensor=1, context=1)),
        "batch_split": _error(tok, os.path.join(root, "e4"), sampler_devices=6),
    }
  print(json.dumps(report))


if __name__ == "__main__":
  main(*sys.argv[1:4])
