"""The RL trainer loop: tasks -> rollouts -> rewards -> advantages -> update.

One iteration, as data (N = B prompts x G generations):
  rollout source (rl.rollout_source) -> B tasks, tokens/logp/mask [N, T], rewards [N]
      single-turn: mixture.sample -> sampler.generate -> reward pool (overlaps ref logp);
      episodes: the episode loop with tools (rl/rollout_source.py has the contract)
  rl.algorithm's estimator      -> adv [N, T]   (registry entry; critic values for PPO)
  train_step x epochs x minibatches                            (jitted, donated)
With dynamic filtering (`filtering.enabled`), further rounds of B prompts
are drawn until B groups with unequal rewards are in hand (rl/filtering.py).
The update is dispatched, not awaited: its metrics (and the non-finite
guard's flag) are read after the next rollout, before the next update
(`rl.metrics_one_step_late`; docs/algorithms.md). Its device time is still
the step's: the loop waits for it before the next rollout starts, and that
wait counts in `time/train_s` and `time/step_s` (not in the next step's
`time/rollout_s`, whose generation could not start before it anyway).
With `rl.overlap_update` the next rollout is launched first, with the
sampler's copy of the params from before the update (rl/overlap_update.py),
and the update is awaited after it: `time/train_s` then counts only the
part of the update that the launch did not hide.
Programs built (traced and compiled) are counted and timed apart
(`time/compile_s`, `compile/programs`, `time/<phase>_compile_s`), and
`throughput/rollout_tokens_per_s` leaves the rollout's compile time out.
The process's RSS and its peak so far are read after the setup and after
each rollout and update (`host/<phase>_rss_gib`, `host/<phase>_peak_rss_gib`;
rl_post/metrics/host_rss.py): the phase whose reading first shows the run's
peak is where it was reached.
Checkpoints hold the TrainState, the iteration count, the mixture's
curriculum state and the rollout source's own state (rl/start_state.py); task
batches and sampling keys are functions of (seed, iteration, round) and that
state, so a resumed run repeats exactly what an uninterrupted one would have done.

The loop's state is explicit (rl/loop_state.py): `Run` holds what it uses,
`LoopState` what each iteration changes, `Step` an update still on the
device; finishing a step returns an `Outcome` (ok, rolled back by the guard,
preempted by SIGTERM) that the loop in `train` acts on.
"""

import os
import time

import jax
import numpy as np
from absl import logging

from rl_post.checkpoint.manager import CheckpointManager
from rl_post.data import tokenizer_fingerprint
from rl_post.metrics import host_rss
from rl_post.metrics import progress as progress_lib
from rl_post.metrics.compiles import CompileClock
from rl_post.metrics.timing import StepTimer
from rl_post.metrics.writers import MetricWriter
from rl_post.parallel import process_data
from rl_post.rewards import process_credit
from rl_post.rewards.scoring import reward_metrics
from rl_post.rl import async_rewards, filtering, off_policy, overlap_update, start_state
from rl_post.rl.components import RLComponents
from rl_post.rl.config import RLConfig
from rl_post.rl.loop_state import LoopState, Outcome, Run, Step
from rl_post.rl.train_step import (minibatches, rollout_batch, shared_prefix_len, trim_batch,
                                   used_width)
from rl_post.training import host_memory
from rl_post.training.faults import FaultInjector, FaultLog
from rl_post.training.guard import NonFiniteGuard
from rl_post.training.preemption import SigtermFlag
from rl_post.training.run import check_not_past, scoped_run


def _rollout_metrics(tasks_N, reward_batch, rollout, rl: RLConfig) -> dict:
  rewards = reward_batch.rewards_N
  groups = rewards.reshape(-1, rl.num_generations)
  metrics = {
      "reward/mean": rewards.mean(), "reward/std": rewards.std(),
      "groups/zero_std_frac": float((groups.std(axis=1) == 0).mean()),
      "response_len/mean": rollout.response_lens_B.mean(),
      "response_len/max": rollout.response_lens_B.max(),
      "response/truncated_frac": 1.0 - rollout.finished_B.mean(),
  }
  metrics.update(reward_metrics(tasks_N, reward_batch))  # reward/<domain>/<component>, errors
  domains = np.array([t.domain for t in tasks_N])
  for domain in sorted(set(domains.tolist())):
    sel = domains == domain
    metrics[f"pass_rate/{domain}"] = reward_batch.correct_N[sel].mean()
    metrics[f"format_rate/{domain}"] = reward_batch.components["format"][sel].mean()
  return metrics



def _process_token_rewards(c: RLComponents, tasks_N, rewards, host):
  """(rewards_N without the process component, its per-token rewards) for
  `rl.process_credit="token"` (rl/config.py; rewards/process_credit.py)."""
  weights_N = np.array([c.rewards.weights_for(t.domain).get("process", 0.0) for t in tasks_N],
                       np.float32)
  totals_N = weights_N * rewards.components.get("process", np.zeros(len(tasks_N), np.float32))
  totals_N = np.where([k is None for k in rewards.error_kinds], totals_N, 0.0)
  process_NxT = process_credit.step_end_rewards_NxT(
      rewards.verdicts, totals_N, host.tokens_BxT, host.mask_BxT, c.ctx.tokenizer.decode)
  return rewards.rewards_N - totals_N, process_NxT


def _rollout_key(c: RLComponents, it: int, rnd: int):
  """The sampling key of round `rnd` of iteration `it`: a function of (seed, it, rnd),
  so a resumed run draws the same; round 0 keeps the unfiltered run's key."""
  key = jax.random.fold_in(c.ctx.key("rollout"), it)
  return jax.random.fold_in(key, rnd) if rnd else key


def _launch_round(c: RLComponents, params, ref_params, timer, it: int, rnd: int) -> dict:
  """One round of B tasks x G rollouts from the run's source, its rewards being
  scored and reference log-probs dispatched (round 0: the step's batch)."""
  return c.source.launch(params, ref_params, it=it, rnd=rnd, key=_rollout_key(c, it, rnd),
                         timer=timer)


def _finish_round(c: RLComponents, state, launched: dict, timer) -> dict:
  """Critic values under the current policy, then waits for the rewards."""
  with timer("reward"):
    values = (c.value_fn(state.params, state.critic, launched["tokens"], state.frozen)
              if c.rl.uses_critic else None)
    rewards = launched["pending"].result()
  ref_logp, trainer_logp = launched["ref_logp"], launched.get("trainer_logp")
  return dict(tasks_N=launched["tasks_N"], host=launched["host"], rewards=rewards,
              ref_logp=None if ref_logp is None else process_data.fetch(ref_logp),
              trainer_logp=None if trainer_logp is None else process_data.fetch(trainer_logp),
              values=None if values is None else process_data.fetch(values))


def _rollout_round(c: RLComponents, state, ref_params, timer, it: int, rnd: int) -> dict:
  """One round, launched and scored at once (the synchronous path)."""
  return _finish_round(c, state, _launch_round(c, c.policy_params(state),
                                               c.reference_params(state, ref_params),
                                               timer, it, rnd), timer)


def _release_before_update(step_fn, state, batch, compiled: set) -> None:
  """Hands the heap's free pages back to the OS right before the update runs,
  compiling it first when `batch`'s shapes are new (`compiled` records them).

  On XLA:CPU the update's intermediates are one temp buffer, a single
  allocation that lands on fresh pages above the heap's holes
  (rl_post.training.host_memory). Those holes come from the rollout's decode
  buffers and, on the first call of each shape, from the compiler's own
  working memory, which grows with the compile threads (the host's cores).
  Released after the compile, neither stays resident while the temp buffer
  is (tests/rl/test_smollm2_rl_step.py measures SmolLM2-135M's step).
  """
  key = (id(step_fn),) + tuple((x.shape, str(x.dtype)) for x in jax.tree.leaves(batch))
  if key not in compiled:
    step_fn.lower(state, batch).compile()
    compiled.add(key)
  host_memory.release_free_memory()


def _save(run: Run, state, done: int):
  run.checkpoints.save(done, state, extra={"rl_step": done,
                                           **start_state.host_state(run.c),
                                           "tokenizer": run.fingerprint}, force=True)


def _collect(run: Run, loop: LoopState):
  """Step loop.it + 1's rollout, scored, and when the step started:
  ((picked, scored, filter_metrics), start). The update on the device is awaited
  first; with `rl.overlap_update`, after launching this rollout with the sampler's
  copy of the params from before that update (rl/overlap_update.py)."""
  c, rl, it = run.c, run.c.rl, loop.it
  held = run.sampler.take(it, loop.dispatched is not None) if run.sampler else None
  if held is None and loop.dispatched is not None:
    _await_update(loop.dispatched)
  start = time.perf_counter()
  if run.pipeline is None:
    return filtering.collect(
        lambda rnd: _rollout_round(c, loop.state, run.ref_params, run.timer, it, rnd),
        lambda r: r["rewards"].rewards_N, rl.batch_size, rl.num_generations, c.filtering), start
  # batches up to it + staleness launched with the sampler's policy (async_rewards.py),
  # on its mesh (rl.sampler_devices: handed over once for all of them)
  params = c.sampler_mesh.place(held.params if held else c.policy_params(loop.state))
  ref_params = c.reference_params(loop.state, run.ref_params)
  entry, filter_metrics = run.pipeline.next(
      it, lambda j: _launch_round(c, params, ref_params, run.timer, j, 0),
      version=held.version if held else it)
  del held, params  # the sampler's copy goes with the launches
  if loop.dispatched is not None:
    _await_update(loop.dispatched)
  picked = _finish_round(c, loop.state, entry.payload, run.timer)
  if rl.recomputes_logp and entry.policy_version < it:  # pi_old: the update's own start
    picked["trainer_logp"] = overlap_update.proximal_logp(c, loop.state, entry.payload)
  return (picked, picked, filter_metrics), start


def _dispatch(run: Run, loop: LoopState, picked, scored, filter_metrics,
              step_start: float) -> Step:
  """Step loop.it + 1's update (dispatched, its metrics left on the device unless
  they are read at once; loop.state becomes its output) and the step's host-side
  metrics."""
  c, rl, it, timer = run.c, run.c.rl, loop.it, run.timer
  tasks_N, host, rewards, ref_logp, values = (
      picked[k] for k in ("tasks_N", "host", "rewards", "ref_logp", "values"))
  rewards_N, process_NxT = rewards.rewards_N, None
  if rl.process_credit == "token":
    rewards_N, process_NxT = _process_token_rewards(c, tasks_N, rewards, host)
  batch = rollout_batch(rl, host.tokens_BxT, host.loss_mask_BxT, host.logp_BxT, rewards_N,
                        ref_logp_NxT=ref_logp, values_NxT=values, process_NxT=process_NxT,
                        trainer_logp_NxT=picked.get("trainer_logp"))
  batch = run.injector.poison(it + 1, batch, "adv")
  if c.trims_width:  # rows end early: the trailing positions are padding everywhere
    batch = trim_batch(batch, used_width(rl, host.prompt_lens_B, host.mask_BxT))
  prefix_len = shared_prefix_len(rl, batch["tokens"])
  step_fn = c.step_fn_for(prefix_len)
  rollout_rss = host_rss.metrics("rollout_")  # before the update: the rollout's own peak
  handover = {}
  if run.sampler is not None:  # the params the next rollout samples, kept from the donation
    with timer("handover"):
      handover = run.sampler.before_update(c, loop.state, it)
  with timer("train"):
    device = []
    for i, mb in enumerate(minibatches(batch, rl, jax.random.fold_in(c.ctx.key("shuffle"), it))):
      mb = process_data.put_batch(mb, c.batch_sharding)
      if i == 0 and run.release_memory:
        _release_before_update(step_fn, loop.state, mb, run.compiled_shapes)
      loop.state, m = step_fn(loop.state, mb)
      device.append(m)
    if not rl.metrics_one_step_late:  # the update's device time counts as time/train_s
      jax.block_until_ready(device)
  metrics = _rollout_metrics(tasks_N, rewards, host, rl)
  metrics.update(rollout_rss, **handover, **c.sampler_mesh.metrics())
  if not rl.metrics_one_step_late:
    metrics.update(host_rss.metrics("update_"))
  if picked.get("trainer_logp") is not None:  # the sampler/trainer log-prob gap
    metrics.update(off_policy.gap_metrics(picked["trainer_logp"], host.logp_BxT,
                                          host.loss_mask_BxT, tis_cap=rl.tis_cap,
                                          mis_low=rl.mis_low, mis_high=rl.mis_high))
  metrics.update(filter_metrics)
  if rl.shared_prefix:  # leading positions the update ran once per group
    metrics["rollout/shared_prefix_len"] = float(prefix_len)
  metrics["rollout/update_width"] = float(batch["tokens"].shape[1])
  metrics["rollout/width"] = float(host.tokens_BxT.shape[1])
  metrics.update(c.source.observe(scored))
  metrics.update(timer.metrics())
  timer.reset()
  return Step(done=it + 1, device=device, host=metrics, start=step_start,
              response_tokens=int(host.response_lens_B.sum()),
              end=None if rl.metrics_one_step_late else time.perf_counter())


def _await_update(step: Step):
  """Waits for a dispatched step's update; the wait joins its time/train_s."""
  if step.end is not None:
    return
  wait_start = time.perf_counter()
  jax.block_until_ready(step.device)  # outputs of the update's program(s)
  step.end = time.perf_counter()
  step.host["time/train_s"] = step.host.get("time/train_s", 0.0) + (step.end - wait_start)
  step.host.update(host_rss.metrics("update_"))


def _roll_back(run: Run, loop: LoopState, done: int) -> Outcome:
  """The guard's verdict on step `done`: back to the newest good checkpoint; the
  rollout already drawn for the next step is dropped."""
  c = run.c
  loop.state, restored_at = start_state.restore_latest(c, run.checkpoints, run.initial_host,
                                                       run.workdir)
  if run.pipeline is not None:
    run.pipeline.drain()  # sampled by the abandoned policy
  run.guard.rolled_back(done, restored_at)
  logging.warning("rl step %d: %d steps with non-finite updates; rolled back to "
                  "iteration %d", done, c.guard.max_nonfinite_steps, restored_at)
  run.writer.truncate_after(restored_at)
  run.timer.reset()
  loop.it = restored_at
  return Outcome.ROLLED_BACK


def _step_metrics(run: Run, loop: LoopState, step: Step, device_metrics: dict) -> dict:
  """A finished step's metrics: its update's and host-side ones, times, MFU, progress
  and, when due, the held-out evaluation."""
  c, rl = run.c, run.c.rl
  metrics = dict(device_metrics)
  metrics.update(step.host)
  # from this step's start to the end of its update (awaited before the next rollout)
  elapsed = step.end - step.start
  metrics["time/step_s"] = elapsed
  if "time/rollout_s" in metrics:  # async: absent in a step that generated nothing
    generating_s = metrics["time/rollout_s"] - metrics.get("time/rollout_compile_s", 0.0)
    metrics["throughput/rollout_tokens_per_s"] = step.response_tokens / max(generating_s, 1e-9)
  if loop.setup_metrics is not None:  # the first step this process reports
    metrics.update(loop.setup_metrics)
    loop.setup_metrics = None
  metrics.update(progress_lib.mfu_metrics(
      progress_lib.rl_step_flops(
          c.model_config, num_sequences=rl.rollouts_per_step,
          seq_len=rl.max_prompt_len + rl.max_new_tokens,
          generated_tokens=rl.rollouts_per_step * rl.max_prompt_len + step.response_tokens,
          num_epochs=rl.num_epochs, with_reference=rl.needs_reference),
      elapsed, rl.peak_flops))
  metrics.update(run.progress.update(step.done, now=step.end))
  done = step.done
  if evaluates_after(done, rl):
    eval_start, (_, eval_built) = time.perf_counter(), run.compile_clock.peek()
    evaluated = c.source.evaluate(c.policy_params(loop.state), step=done,
                                  key=jax.random.fold_in(c.ctx.key("eval"), done))
    if evaluated:  # its time, reported with the step it follows
      metrics.update(evaluated)
      metrics["time/eval_s"] = time.perf_counter() - eval_start
      metrics["time/eval_compile_s"] = run.compile_clock.peek()[1] - eval_built
  metrics.update(run.guard.metrics(), **run.fault_log.metrics())
  return metrics


def evaluates_after(done: int, rl: RLConfig) -> bool:
  """Whether the held-out set is evaluated after step `done`: every `rl.eval_every`
  steps, and after the last one unless `rl.eval_at_end` is off."""
  if done == rl.num_steps:
    return rl.eval_at_end
  return bool(rl.eval_every) and done % rl.eval_every == 0


def _finish(run: Run, loop: LoopState) -> Outcome:
  """Finishes loop.dispatched: reads its update metrics; then its guard decision,
  metrics, eval, checkpoint and faults."""
  step, loop.dispatched = loop.dispatched, None
  rl, done = run.c.rl, step.done
  device = jax.device_get(step.device)
  skipped = int(sum(m["guard/skipped"] for m in device))
  if run.guard.observe(done, skipped):
    return _roll_back(run, loop, done)
  metrics = _step_metrics(run, loop, step,
                          {k: float(np.mean([m[k] for m in device])) for k in device[0]})
  run.writer.write(done, metrics)
  logging.info("rl %s", run.progress.line(done, metrics))
  if done % rl.checkpoint_every == 0 or done == rl.num_steps:
    _save(run, loop.state, done)
    run.injector.after_checkpoint(done, run.checkpoints.directory,
                                  run.checkpoints.wait_until_finished)
  loop.last_metrics = metrics
  run.injector.after_step(done)
  if run.preempt.requested and done < rl.num_steps:
    if run.checkpoints.latest_step() != done:
      _save(run, loop.state, done)
    run.fault_log.record("sigterm_checkpointed", done)
    logging.warning("SIGTERM: saved checkpoint at iteration %d; exiting", done)
    return Outcome.PREEMPTED
  return Outcome.OK


def _setup_metrics(c: RLComponents, compile_clock, setup_start: float) -> dict:
  """Start-up time and programs built, reported with the first step."""
  setup_programs, setup_compile_s = compile_clock.take()
  setup = {"time/setup_s": time.perf_counter() - setup_start,
           "time/setup_compile_s": setup_compile_s, **host_rss.metrics("setup_")}
  logging.info("rl setup (model, state, reward pool) took %.1fs, %d programs built in %.1fs",
               setup["time/setup_s"], setup_programs, setup_compile_s)
  shapes = c.source.shapes
  if shapes is not None:  # rl_post/rl/shape_buckets.py
    logging.info("rl shapes: %s", shapes.describe())
    setup["compile/update_programs_bound"] = float(shapes.update_programs)
  return setup


@scoped_run
def train(config, workdir: str) -> dict:
  """Runs (or resumes) `config.rl.algorithm`; returns the final metrics."""
  setup_start = time.perf_counter()
  compile_clock = CompileClock()
  c = RLComponents(config, workdir)
  ctx, rl = c.ctx, c.rl
  state = start_state.fresh_state(c)
  initial_host = start_state.host_state(c)  # the mixture's and the source's
  ref_params = start_state.reference_copy(c, state)
  fault_log = FaultLog(workdir)
  checkpoints = CheckpointManager(os.path.join(workdir, "checkpoints"), max_to_keep=3,
                                  on_event=fault_log.record)
  start = 0
  if checkpoints.latest_step() is not None:
    state, start = start_state.restore_latest(c, checkpoints, initial_host, workdir)
    logging.info("resumed from iteration %d", start)
  check_not_past(start, rl.num_steps, "rl.num_steps", workdir)
  ctx.write_config(start)  # after the restore: a workdir the config does not fit keeps its own
  writer = MetricWriter(workdir, truncate_after_step=start)
  c.source.start()  # single-turn: the reward pool, one per host
  if not rl.peak_flops:
    logging.info("rl.peak_flops is 0: perf/mfu omitted (perf/model_tflop is logged)")
  run = Run(
      c=c, workdir=workdir, ref_params=ref_params, checkpoints=checkpoints,
      writer=writer, guard=NonFiniteGuard(c.guard, fault_log),
      injector=FaultInjector(c.faults, fault_log), fault_log=fault_log,
      timer=StepTimer(compile_clock=compile_clock),
      progress=progress_lib.Progress(rl.num_steps, start, clock=time.perf_counter),
      pipeline=(async_rewards.RolloutPipeline(overlap_update.pipeline_staleness(rl),
                                              rl.num_steps, rl.checkpoint_every)
                if rl.async_rewards or rl.overlap_update else None),
      sampler=(overlap_update.SamplerSlot(c.sampler_mesh.hand_over) if rl.overlap_update
               else None),
      compile_clock=compile_clock, preempt=SigtermFlag().__enter__(),
      initial_host=initial_host, fingerprint=tokenizer_fingerprint.of(ctx.tokenizer),
      # on XLA:CPU the device's buffers are host memory (rl_post.training.host_memory)
      compiled_shapes=set(), release_memory=host_memory.runs_on_cpu())
  loop = LoopState(state=state, it=start,
                   setup_metrics=_setup_metrics(c, compile_clock, setup_start))
  # Step t's update metrics are read after step t + 1's rollout (or right
  # after the update when rl.metrics_one_step_late is False), but always
  # before step t + 1's update: the guard can still roll back by dropping
  # that rollout, and checkpoint t holds exactly the state after update t.
  try:
    while loop.it < rl.num_steps or loop.dispatched is not None:
      rollout, step_start = _collect(run, loop) if loop.it < rl.num_steps else (None, None)
      if loop.dispatched is not None:
        _await_update(loop.dispatched)  # after the last step (_collect awaits the others)
        outcome = _finish(run, loop)
        if outcome is Outcome.PREEMPTED:
          break
        if outcome is Outcome.ROLLED_BACK:
          continue
      if rollout is None:
        break
      loop.dispatched = _dispatch(run, loop, *rollout, step_start)
      loop.it += 1
      if not rl.metrics_one_step_late and _finish(run, loop) is Outcome.PREEMPTED:
        break
  finally:
    run.preempt.__exit__()
    checkpoints.close()
    writer.close()
    c.source.close()
  return {"state": loop.state, "metrics": loop.last_metrics, "context": ctx,
          "preempted": loop.it < rl.num_steps}
