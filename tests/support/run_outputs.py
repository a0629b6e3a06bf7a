"""What a test reads back from finished train_rl.py child runs: their exit, their
metrics without the machine's measurements, and their last checkpoint's params."""

import os

import numpy as np


def wait_all(procs, what: str) -> list[str]:
  """Each child's output; fails with their logs' tails unless every one exited 0."""
  logs = [p.communicate(timeout=600)[0] for p in procs]
  assert [p.returncode for p in procs] == [0] * len(procs), what + "\n".join(
      log[-3000:] for log in logs)
  return logs


def metrics_by_step(workdir, volatile: tuple) -> dict:
  """{step: metrics row without the keys starting with `volatile`}."""
  from rl_post.metrics.writers import read_metrics  # noqa: PLC0415
  return {r["step"]: {k: v for k, v in r.items() if not k.startswith(volatile)}
          for r in read_metrics(str(workdir))}


def final_params(workdir, step: int) -> dict:
  """Checkpoint `step`'s params as numpy (restored without the run's devices)."""
  import jax  # noqa: PLC0415
  import orbax.checkpoint as ocp  # noqa: PLC0415
  path = os.path.join(workdir, "checkpoints", str(step), "state")
  with ocp.PyTreeCheckpointer() as ckptr:
    tree = ckptr.metadata(path).item_metadata.tree
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    state = ckptr.restore(path, args=ocp.args.PyTreeRestore(restore_args=args))
  return {jax.tree_util.keystr(p): x for p, x in
          jax.tree_util.tree_flatten_with_path(state["params"])[0]}
