"""Rollouts generated while the update runs (`rl.overlap_update`).

Without it, iteration t + 1's rollout waits for update t: the sampler needs
its params. With it, the loop reads, per iteration t + 1:

    update t dispatched        (jitted, donated; JAX returns at once)
      before it: the sampler's copy of the params it starts from (version t)
    launch rollout(s) t + 1 .. with that copy, while update t runs
    await update t             (its metrics, guard, checkpoint as before)
    score rollout t + 1, critic values and reference with the new state
    update t + 1 on it         (the batch is one policy version stale)

so batch t + 1 is sampled by the policy of step t and trained on by the
policy of step t + 1. With `rl.async_rewards` the same copy launches every
batch up to the pipeline's horizon (rl/async_rewards.py), so a batch lags
the policy that trains on it by at most `max_staleness(rl)` =
`async_staleness + 1` updates. Each rollout records the version that
sampled it (`InFlight.policy_version`) and every step logs `async/staleness`.

The sampler's copy: the update donates the train state, so the buffers the
update reads are deleted when it is dispatched. `hand_over` copies the
params the sampler reads before that (only the leaves the state owns: with
LoRA the merged params are already a copy) and waits for the copy, so the
donation cannot touch it. That copy, one set of policy params, is the
memory the overlap costs (`overlap/sampler_params_gib`), held from the
update's dispatch until the rollouts it samples are launched. On one mesh
the copy keeps the params' own shardings, and since a device runs programs
in dispatch order the generation's programs queue behind the update there:
the overlap hides the host's work (prompts, the rollout's host copy, reward
submission and wait, bookkeeping). With `rl.sampler_devices` the sampler has
a mesh of its own (rl/sampler_mesh.py): `SamplerSlot` is handed that mesh's
`hand_over`, the copy is the weight hand-over between the meshes (a
`jax.device_put` with the sampler's shardings, on the sampler's devices), and
rollout t + 1 generates there while update t runs on the trainer's devices.

What is exact: an iteration right after a periodic checkpoint
(`checkpoint_every`) is not overlapped (`overlaps`): its rollout waits for
the update, as in the synchronous loop, so a run resumed from that
checkpoint repeats the uninterrupted one exactly; with `checkpoint_every = 1`
nothing overlaps and the run equals the synchronous one. Reference
log-probs and critic values are those the synchronous loop computes for the
same tokens (the reference is frozen; values read the state the update
starts from). With `rl.recomputes_logp` (TIS/MIS, a low-precision sampler)
a stale batch's old log-probs are recomputed with the params the update
starts from (`proximal_logp`): the clipped ratio is taken against them and
the importance weight against the behaviour log-probs the sampler recorded
(decoupled PPO), and the `offpolicy/*` metrics show the stale batch's gap.
"""

import dataclasses
from typing import Any, Callable, Optional

import jax

from rl_post.parallel import process_data
from rl_post.rl.async_rewards import launch_horizon
from rl_post.rl.config import RLConfig
from rl_post.rl.train_step import shared_prefix_len

GIB = 2**30


def pipeline_staleness(rl: RLConfig) -> int:
  """How far ahead of the current iteration the pipeline launches (0 without async rewards)."""
  return rl.async_staleness if rl.async_rewards else 0


def max_staleness(rl: RLConfig) -> int:
  """The most updates between sampling a batch and training on it."""
  return pipeline_staleness(rl) + int(rl.overlap_update)


def overlaps(it: int, rl: RLConfig) -> bool:
  """Whether iteration `it`'s rollouts are launched while update it - 1 runs.

  Not the first iteration, not past the run, not one right after a periodic
  checkpoint (its rollout waits, so a resume from there is exact), and only
  when the pipeline launches something at `it` (with async rewards the
  horizon stops growing near a checkpoint or the end of the run).
  """
  if not rl.overlap_update or not 0 < it < rl.num_steps or it % rl.checkpoint_every == 0:
    return False
  s = pipeline_staleness(rl)
  return (launch_horizon(it, s, rl.num_steps, rl.checkpoint_every)
          > launch_horizon(it - 1, s, rl.num_steps, rl.checkpoint_every))


def tree_nbytes(tree) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(tree))


def hand_over(params, donated, shardings=None):
  """`params` as the sampler's own arrays, placed with `shardings` (default: each
  leaf's own) and ready: every leaf that is also a leaf of `donated` (the
  state the next update donates) is copied; others move only to reshard."""
  owned = {id(x) for x in jax.tree.leaves(donated)}
  if shardings is None:
    shardings = jax.tree.map(lambda x: x.sharding, params)
  copy = jax.tree.map(
      lambda x, s: jax.device_put(x, s, may_alias=False if id(x) in owned else None),
      params, shardings)
  return jax.block_until_ready(copy)


@dataclasses.dataclass
class Held:
  """The sampler's params and the iterations completed by the policy they are."""
  params: Any
  version: int


class SamplerSlot:
  """The sampler's copy of the policy between an update's dispatch and the
  launches it overlaps (module docstring); `hand_over_fn(params, donated)` makes
  it (default `hand_over`, on the trainer's devices; a sampler mesh's
  `rl.sampler_mesh.SamplerMesh.hand_over` moves it to the sampler's)."""

  def __init__(self, hand_over_fn: Optional[Callable] = None):
    self._hand_over = hand_over_fn or hand_over
    self._held: Optional[Held] = None

  def before_update(self, c, state, it: int) -> dict:
    """Before update `it` is dispatched on `state`: hands the sampler the policy
    (version `it`) when iteration it + 1 overlaps that update; its metrics."""
    self._held = None
    if not overlaps(it + 1, c.rl):
      return {"overlap/sampler_params_gib": 0.0}
    params = self._hand_over(c.policy_params(state), state)
    self._held = Held(params, it)
    return {"overlap/sampler_params_gib": tree_nbytes(params) / GIB}

  def take(self, it: int, in_flight: bool) -> Optional[Held]:
    """The copy iteration `it` launches with (version it - 1, while update
    it - 1 is `in_flight`), or None: wait for the update and use its state.
    The slot is empty after (the copy lives while the caller holds it)."""
    held, self._held = self._held, None
    if held is None or not in_flight or held.version != it - 1:
      return None
    return held


def proximal_logp(c, state, payload):
  """The log-probs of a launched round's tokens under `state`'s policy (the
  params the update starts from), on the host: a stale batch's old log-probs."""
  host = payload["host"]
  ref_fn = c.ref_fn_for(shared_prefix_len(c.rl, host.tokens_BxT))
  logp = ref_fn(c.policy_params(state), payload["tokens"], c.shard(host.loss_mask_BxT))
  return process_data.fetch(logp)
