"""Tools of one group of rows overlapped with generation of another.

The engine decodes a batch in lockstep, so within one `run_episodes` batch
the tools run between turns while nothing generates. `run_overlapped`
splits the rows into `num_groups` groups and runs each as its own
`run_episodes` in its own thread: while one group waits on the sandbox,
the others generate (JAX releases the GIL while it computes, the sandbox
while it waits). Row results equal those of one batch with the same seeds
(draws depend only on row seed, position and tokens); the rollouts are
padded to the longest group's width and concatenated.
"""

import concurrent.futures

import jax
import numpy as np

from rl_post.envs.episodes import EpisodeResult, run_episodes
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.sampling.sampler import Rollout


def _pad_T(x, width, value):
  pad = [(0, 0)] * x.ndim
  pad[1] = (0, width - x.shape[1])
  return np.pad(np.asarray(x), pad, constant_values=value)


def concat_rollouts(rollouts, pad_id: int) -> Rollout:
  width = max(r.tokens_BxT.shape[1] for r in rollouts)
  fields = {}
  for name in ("tokens_BxT", "logp_BxT", "trunc_logz_BxT", "mask_BxT", "loss_mask_BxT"):
    value = pad_id if name == "tokens_BxT" else 0
    fields[name] = np.concatenate([_pad_T(getattr(r, name), width, value) for r in rollouts])
  for name in ("prompt_lens_B", "response_lens_B", "finished_B"):
    fields[name] = np.concatenate([np.asarray(getattr(r, name)) for r in rollouts])
  return Rollout(**fields)


def run_overlapped(params, envs, tasks, *, seeds_B, num_groups: int = 2, tokenizer,
                   checkpoint_path=None, metrics=None, **kwargs) -> EpisodeResult:
  """`run_episodes` over `num_groups` row groups in parallel threads; same arguments.

  `metrics` (optional) receives the merged counts of all groups.
  """
  if jax.process_count() > 1:  # each group's collectives would interleave across processes
    raise ValueError("run_overlapped runs on one process; on several, run_episodes splits the "
                     "rows over processes (rl_post.envs.process_rows)")
  if num_groups < 1 or num_groups > len(envs):
    raise ValueError(f"num_groups must be in [1, {len(envs)}], got {num_groups}")
  seeds_B = np.asarray(seeds_B)
  groups = np.array_split(np.arange(len(envs)), num_groups)

  def run(i, rows):
    return run_episodes(params, [envs[b] for b in rows], [tasks[b] for b in rows],
                        tokenizer=tokenizer, seeds_B=seeds_B[rows],
                        checkpoint_path=f"{checkpoint_path}.g{i}" if checkpoint_path else None,
                        metrics=EpisodeMetrics(), **kwargs)

  with concurrent.futures.ThreadPoolExecutor(num_groups) as pool:
    results = list(pool.map(run, range(num_groups), groups))
  metrics = metrics if metrics is not None else EpisodeMetrics()
  for r in results:
    metrics.merge(r.metrics)
  cat = lambda name: np.concatenate([getattr(r, name) for r in results])
  rollout = concat_rollouts([jax.device_get(r.rollout) for r in results], tokenizer.pad_id)
  return EpisodeResult(rollout, cat("rewards_B"), cat("turns_B"), cat("calls_B"),
                       cat("context_exhausted_B"), metrics)
