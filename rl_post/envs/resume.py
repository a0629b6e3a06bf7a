"""Resuming an episode batch after a crash, from its last completed turn.

`run_episodes(..., checkpoint_path=p)` writes, atomically, before every
resume of generation: the sequences so far (tokens, behaviour log-probs,
masks, lengths, seeds), the tool responses about to be appended, and the
environments (workspaces, transcripts, counters), pickled. After a crash
(kill -9 included) the same call with the same arguments finds the file and
rebuilds the decode state instead of starting over: one prefill of the
prompts, one append of everything generated and appended since, the
recorded log-probs and masks put back, and generation resumes for the rows
that were waiting. Draws depend only on (row seed, position) and the
tokens, so the resumed batch produces the same tokens as an uninterrupted
one (tested with kill -9). The checkpoint names its tasks; a checkpoint of
other tasks is refused.
"""

import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np

from rl_post.sampling import engine, sampler


def save(path: str, snapshot: dict):
  tmp = f"{path}.tmp.{os.getpid()}"
  with open(tmp, "wb") as f:
    pickle.dump(snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def load(path: str, task_ids):
  """The snapshot at `path` (None if absent); ValueError if it is another batch's."""
  if not os.path.exists(path):
    return None
  with open(path, "rb") as f:
    snapshot = pickle.load(f)  # our own file, written by `save`
  if snapshot.get("task_ids") != list(task_ids):
    raise ValueError(f"checkpoint {path} belongs to another episode batch")
  return snapshot


def snapshot_of(state, prompts, lens, pending, appended, envs, turn_start, calls, exhausted,
                metrics, task_ids) -> dict:
  host = jax.device_get((state.tokens_BxT, state.logp_BxT, state.trunc_logz_BxT,
                         state.loss_mask_BxT, state.lengths_B, state.seeds_B, state.stopped_B))
  keys = ("tokens", "logp", "trunc_logz", "loss_mask", "lengths", "seeds", "stopped")
  snap = {k: np.asarray(v) for k, v in zip(keys, host)}
  snap.update(prompts=np.asarray(prompts), lens=np.asarray(lens), pending=list(pending),
              appended=[list(a) for a in appended], envs=envs, turn_start=np.asarray(turn_start),
              calls=np.asarray(calls), exhausted=np.asarray(exhausted), metrics=metrics,
              task_ids=list(task_ids))
  return snap


def lengths_after_append(snap) -> np.ndarray:
  """Each row's length once the snapshot's pending tool responses are appended."""
  after = np.array(snap["lengths"], np.int32)
  for b, ids in zip(snap["pending"], snap["appended"]):
    after[b] += len(ids)
  return after


def rebuild(params, snap, *, model_config, sampling, pad_id, eos_id, budget_B, detokenize):
  """The DecodeState after the snapshot's pending responses, generation resumed with
  per-row budgets `budget_B` (what the uninterrupted loop would have passed)."""
  prompts, lens = sampler.pad_prompts(snap["prompts"], snap["lens"], sampling, pad_id)
  batch, capacity = snap["tokens"].shape
  budget = sampler.budget(sampling, budget_B, batch)
  state = engine.prefill(params, jnp.asarray(prompts), jnp.asarray(lens),
                         jnp.asarray(snap["seeds"]), budget, model_config=model_config,
                         capacity=capacity, group_size=1, pad_id=pad_id)
  pending = np.zeros(batch, bool)
  pending[snap["pending"]] = True
  extra = dict(zip(snap["pending"], snap["appended"]))
  rows = [list(snap["tokens"][b, lens[b]:snap["lengths"][b]]) + extra.get(b, [])
          for b in range(batch)]
  counts = np.array([len(r) for r in rows], np.int32)
  width = sampler.bucket(max(int(counts.max()), 1), sampling.length_buckets)
  chunk = np.full((batch, width), pad_id, np.int32)
  for b, r in enumerate(rows):
    chunk[b, :len(r)] = r
  state = engine.append(params, state, jnp.asarray(chunk), jnp.asarray(counts),
                        jnp.asarray(pending), budget, model_config=model_config, pad_id=pad_id)
  state = state.replace(logp_BxT=jnp.asarray(snap["logp"]),
                        trunc_logz_BxT=jnp.asarray(snap["trunc_logz"]),
                        loss_mask_BxT=jnp.asarray(snap["loss_mask"]),
                        done_B=jnp.asarray(~pending),
                        stopped_B=jnp.asarray(np.where(pending, False, snap["stopped"])))
  state = sampler._run(params, state, sampler._with_eos(sampling, eos_id), model_config, pad_id,
                       detokenize)
  return sampler.rollout_of(state), state
