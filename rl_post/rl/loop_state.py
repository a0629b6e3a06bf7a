"""The RL trainer loop's state, as explicit objects (used by `rl_post.rl.trainer.train`).

  run = Run(...)                    what the loop uses and never replaces: components,
                                    reference params, checkpoints, writer, guard, faults,
                                    timer, progress, the async pipeline, the sampler's
                                    copy of the policy (rl.overlap_update)
  loop = LoopState(state, it=start) what each iteration changes: the TrainState, the
                                    next iteration, the update still on the device
  each iteration: collect a rollout -> finish the dispatched update (an `Outcome`)
                  -> dispatch this rollout's update as a `Step`

A `Step` is an update handed to the device whose metrics, guard decision,
checkpoint and evaluation are still to come (`rl.metrics_one_step_late`:
after the next rollout); finishing it yields an `Outcome` that steers the loop.
"""

import dataclasses
import enum
from typing import Any, Optional


class Outcome(enum.Enum):
  """What finishing a dispatched step decided."""
  OK = "ok"                    # metrics written, checkpoint saved when due: go on
  ROLLED_BACK = "rolled_back"  # the guard restored the newest good checkpoint (state and it)
  PREEMPTED = "preempted"      # SIGTERM: a checkpoint of this step is saved; stop


@dataclasses.dataclass
class Step:
  """An update dispatched to the device, not yet finished.

  Attributes:
    done: the iteration count once this update is applied.
    device: per-minibatch update metrics, still on the device until finished.
    host: the step's host-side metrics (rollout, rewards, curriculum, time).
    start: `time.perf_counter()` at the start of the step's rollout.
    response_tokens: response tokens the step's rollout generated.
    end: when its update had run (set on dispatch when awaited at once, else
      by `await_update`); None while it may still be running.
  """
  done: int
  device: list
  host: dict
  start: float
  response_tokens: int
  end: Optional[float] = None


@dataclasses.dataclass
class LoopState:
  """What the loop carries from one iteration to the next.

  Attributes:
    state: the TrainState after every dispatched update.
    it: the next iteration to update on; every one before it is dispatched.
    dispatched: the update on the device whose step is not finished, or None.
    last_metrics: the metrics of the last finished step.
    setup_metrics: start-up time and programs, reported with the first step
      this process finishes (None after).
  """
  state: Any
  it: int
  dispatched: Optional[Step] = None
  last_metrics: dict = dataclasses.field(default_factory=dict)
  setup_metrics: Optional[dict] = None


@dataclasses.dataclass(frozen=True)
class Run:
  """What the loop uses and never replaces (some hold state of their own: the
  writer, guard, timer, progress, pipeline, sampler and `compiled_shapes`
  record what they have seen).

  Attributes:
    c: the run's `RLComponents` (its rollout source included).
    workdir: as `train` was given it.
    ref_params: the frozen reference's params copy, or None (`c.reference_params`).
    initial_host: the host-side state at the start (`start_state.host_state`: the
      mixture's and the rollout source's), restored with the initial state.
    fingerprint: the tokenizer's, saved with every checkpoint.
    pipeline: rollouts launched ahead (`async_rewards.RolloutPipeline`), or None.
    sampler: with `rl.overlap_update`, the `overlap_update.SamplerSlot` holding the
      params the next rollout samples while an update runs; else None.
    compiled_shapes: (step_fn, batch shapes) compiled ahead of their first update.
    release_memory: hand free heap pages back before each update (XLA:CPU).
  """
  c: Any
  workdir: str
  ref_params: Any
  checkpoints: Any
  writer: Any
  guard: Any
  injector: Any
  fault_log: Any
  timer: Any
  progress: Any
  pipeline: Any
  sampler: Any
  compile_clock: Any
  preempt: Any
  initial_host: dict
  fingerprint: Any
  compiled_shapes: set
  release_memory: bool
