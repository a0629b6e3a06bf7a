"""Supervised fine-tuning on generated demonstrations, response-only loss.

Each step draws tasks from the mixture's "sft" stream (held-out tasks are
excluded), renders each domain's reference response, and trains on the
response tokens only; or takes the next examples of `sft.dataset`
(single-turn pairs, or multi-turn tool-use episodes whose loss covers the
assistant turns only). The final params are exported to `workdir/export`
for the RL stage to start from.
"""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from rl_post import models
from rl_post.checkpoint.manager import (CheckpointManager, CheckpointMismatchError,
                                        CorruptCheckpointError)
from rl_post.checkpoint.params import save_params
from rl_post.config_sections import check, from_section
from rl_post.data import batching, tokenizer_fingerprint
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.errors import ConfigError
from rl_post.envs import trainer_rounds
from rl_post.sft import dataset as sft_dataset
from rl_post.sft import episodes as sft_episodes
from rl_post.metrics.timing import StepTimer
from rl_post.metrics.writers import MetricWriter
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import process_data
from rl_post.parallel import sharding
from rl_post.models import lora as lora_lib
from rl_post.models import peft
from rl_post.models.lora import LoraConfig
from rl_post.models.logprobs import (REMAT_POLICIES, chunked_token_stats, hidden_states,
                                     output_matrix_ExV, token_logprobs_from_logits)
from rl_post.training import state as state_lib
from rl_post.training.faults import FaultInjector, FaultLog, FaultsConfig
from rl_post.training.guard import GuardConfig, NonFiniteGuard
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.preemption import SigtermFlag
from rl_post.training.run import (check_not_past, mismatched_checkpoints, pretrained_params,
                                  run_sections, scoped_run, setup_run)
from rl_post.training.step import jit_train_step, make_train_step

EXPORT_DIR = "export"


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """Attributes:
    num_steps: optimizer steps.
    batch_size: demonstrations per step.
    max_len: token budget per example (longer ones are dropped and counted).
    checkpoint_every: checkpoint period in steps.
    packing: several demonstrations per row (sequence packing, first-fit
      decreasing; attention and positions kept per demonstration): the step's
      batch_size demonstrations take as many rows of max_len as they need,
      rounded up to a multiple of pack_row_multiple (so a few batch shapes,
      each compiled once), instead of batch_size rows.
    pack_row_multiple: with packing, rows per batch are a multiple of this
      (and of the mesh's batch axes).
    dataset: a JSONL file of examples to train on instead of the domains'
      demonstrations ("": demonstrations): {"prompt", "response"} pairs, e.g.
      a rejection-sampling fine-tuning set, or multi-turn {"messages"}
      episodes, e.g. the oracle episodes of a cold start, rendered as the
      config's `episodes` section renders RL episodes, with the loss on the
      assistant turns only (`rl_post/sft/dataset.py`, `rl_post/sft/episodes.py`).
    logprob_chunk: 0 computes the loss from the whole [B, T, V] logits; n > 0
      computes it n positions at a time from the trunk's hidden states
      (`rl_post.models.logprobs.chunked_token_stats`, as the RL update does), so at
      most one chunk's logits is alive and a pretrained model's large vocabulary
      does not set the step's peak memory. Same loss and gradients.
    remat: rematerialisation policy of the layers on the chunked path ("none",
      "full" or "dots", as `rl.remat`).
    lora: LoRA adapters (`rl_post.models.lora.LoraConfig`; rank 0 = off): only
      they train; the export holds the merged model, and `export/adapter` the
      adapters alone in the PEFT layout (`rl_post.models.peft`).
  """
  num_steps: int = 500
  batch_size: int = 64
  max_len: int = 96
  checkpoint_every: int = 100
  packing: bool = False
  pack_row_multiple: int = 4
  dataset: str = ""
  logprob_chunk: int = 0
  remat: str = "none"
  lora: LoraConfig = LoraConfig()

  def __post_init__(self):
    if not isinstance(self.lora, LoraConfig):
      object.__setattr__(self, "lora", from_section(LoraConfig, self.lora, "sft.lora"))
    check(self.num_steps >= 0, "num_steps", "must be >= 0", self.num_steps)
    check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
    check(self.max_len > 1, "max_len", "must be > 1", self.max_len)
    check(self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1", self.checkpoint_every)
    check(isinstance(self.packing, bool), "packing", "must be a bool", self.packing)
    check(isinstance(self.pack_row_multiple, int) and self.pack_row_multiple >= 1,
          "pack_row_multiple", "must be an int >= 1", self.pack_row_multiple)
    check(isinstance(self.logprob_chunk, int) and self.logprob_chunk >= 0, "logprob_chunk",
          "must be an int >= 0 (0: the whole logits at once)", self.logprob_chunk)
    check(self.remat in REMAT_POLICIES, "remat", f"must be one of {REMAT_POLICIES}", self.remat)
    check(self.remat == "none" or self.logprob_chunk > 0, "remat",
          "applies to the chunked loss only; set sft.logprob_chunk > 0 too", self.remat)

  @property
  def batch_keys(self) -> tuple[str, ...]:
    return ("tokens", "mask", "positions", "segments") if self.packing else ("tokens", "mask")

  @property
  def row_multiple(self) -> int:
    """Every batch's rows are a multiple of this."""
    return self.pack_row_multiple if self.packing else self.batch_size


def make_sft_loss(model_config, context_mesh=None, sft: SFTConfig | None = None):
  """Mean next-token cross-entropy over response tokens (mask == 1).

  With `sft.logprob_chunk` > 0 the logits are computed a chunk of positions at
  a time (see SFTConfig); otherwise all at once, the reference path. With
  `sft.lora` on, `params` are the adapters over the `frozen` base (dropout
  keys from `rng`).
  """
  chunk, remat = (sft.logprob_chunk, sft.remat) if sft is not None else (0, "none")
  lora = sft.lora if sft is not None else None

  def token_stats(params, batch, adapters):
    """(logp_BxT, top1_BxT): log p of each token and whether it was the argmax."""
    tokens_BxT = batch["tokens"]
    if chunk:
      h_BxTxE = hidden_states(model_config, params, tokens_BxT, remat=remat,
                              context_mesh=context_mesh, positions_BxT=batch.get("positions"),
                              segment_ids_BxT=batch.get("segments"), lora=adapters)
      logp_BxT, _, top1_BxT = chunked_token_stats(
          h_BxTxE, output_matrix_ExV(model_config, params), tokens_BxT, 1.0, chunk,
          batch["mask"])
      return logp_BxT, top1_BxT
    logits = models.apply(model_config, params, tokens_BxT, context_mesh=context_mesh,
                          positions=batch.get("positions"), segment_ids=batch.get("segments"),
                          lora=adapters)
    logp_BxT, _ = token_logprobs_from_logits(logits, tokens_BxT)
    predicted = jnp.argmax(logits[:, :-1], axis=-1) == tokens_BxT[:, 1:]
    top1_BxT = jnp.pad(predicted.astype(jnp.float32), ((0, 0), (1, 0)))
    return logp_BxT, top1_BxT

  def loss_fn(params, batch, rng, frozen=None):
    params, adapters = lora_lib.model_inputs(params, frozen, lora, model_config.num_layers, rng)
    logp_BxT, top1_BxT = token_stats(params, batch, adapters)
    mask = batch["mask"].astype(jnp.float32)
    num_tokens = jnp.maximum(mask.sum(), 1.0)
    loss = -(logp_BxT * mask).sum() / num_tokens
    accuracy = (top1_BxT[:, 1:] * mask[:, 1:]).sum() / num_tokens
    return loss, {"token_accuracy": accuracy, "response_tokens": mask.sum()}

  return loss_fn


def demonstration_batch(mixture: TaskMixture, tokenizer, step: int, sft: SFTConfig,
                        examples=None, seed: int = 0, render_episode=None):
  """tokens/mask [rows, max_len] for SFT step `step` (with packing, positions and
  segments too), plus #dropped. With `examples` (of `sft.dataset`: (prompt,
  response) pairs or multi-turn `Episode`s), the step's batch comes from them
  instead of the mixture; `render_episode` turns an episode into (ids, loss
  mask) (`rl_post.sft.episodes.renderer`)."""
  if examples is not None:
    rendered = [render_episode(e) if isinstance(e, sft_dataset.Episode)
                else batching.demonstration_ids(tokenizer, *e)
                for e in sft_dataset.pick(examples, step, sft.batch_size, seed)]
  else:
    tasks = mixture.sample(step, sft.batch_size, stream="sft")
    rendered = [batching.demonstration_ids(tokenizer, t.prompt,
                                           mixture.domain_of(t).demonstration(t))
                for t in tasks]
  if sft.packing:
    return batching.pack_rendered(rendered, sft.max_len, tokenizer.pad_id,
                                  sft.pack_row_multiple)
  tokens, mask, dropped = batching.encode_rendered(rendered, sft.max_len, tokenizer.pad_id)
  missing = sft.batch_size - tokens.shape[0]  # dropped rows become all-masked padding
  tokens = np.pad(tokens, ((0, missing), (0, 0)), constant_values=tokenizer.pad_id)
  mask = np.pad(mask, ((0, missing), (0, 0)))
  return {"tokens": tokens, "mask": mask}, dropped


def sft_sections(config) -> dict:
  """The SFT trainer's own config sections, parsed: what a run (or the demo pipeline,
  before any stage) validates before it reads inputs or writes files. "episodes" is
  the RL run's (an `EpisodesConfig`, or None): an episodes cold start trains with its
  tokenizer and renders multi-turn examples as its episodes are."""
  sections = dict(sft=from_section(SFTConfig, config.get("sft"), "sft"),
                  tasks=from_section(TaskConfig, config.get("tasks"), "tasks"),
                  opt=from_section(OptimizerConfig, config.get("optimizer"), "optimizer"),
                  guard=from_section(GuardConfig, config.get("guard"), "guard"),
                  faults=from_section(FaultsConfig, config.get("faults"), "faults"),
                  episodes=trainer_rounds.load(config.get("episodes")))
  if sections["faults"].nonfinite_loss_at_steps:
    raise ValueError("faults.nonfinite_loss_at_steps is only supported by the RL trainer "
                     f"(SFT batches have no float input to poison), got "
                     f"{sections['faults'].nonfinite_loss_at_steps}")
  return sections


def _check_dropped(dropped: int, step: int, sft: SFTConfig):
  """Demonstrations longer than sft.max_len are dropped: all of a batch is an error (the
  step would train on nothing), half or more a warning."""
  if dropped >= sft.batch_size:
    raise ConfigError("sft.max_len", sft.max_len, f"is shorter than every demonstration of "
                      f"step {step}'s batch (all {dropped} dropped)")
  if 2 * dropped >= sft.batch_size:
    logging.warning("sft step %d: %d of %d demonstrations are longer than sft.max_len=%d and "
                    "were dropped", step, dropped, sft.batch_size, sft.max_len)


@scoped_run
def train(config, workdir: str) -> dict:
  """Runs (or resumes) SFT; exports params to workdir/export.

  Every section is parsed here, once (`sft_sections`, `run_sections`), and passed
  down typed; `config` itself is kept only to write workdir/config.json and to
  name what a resume changed against the stored one."""
  sections = sft_sections(config)  # before the run's inputs are read
  sft, tasks, opt = sections["sft"], sections["tasks"], sections["opt"]
  examples = sft_dataset.load_examples(sft.dataset) if sft.dataset else None
  episodes = None  # multi-turn examples are rendered as the config's RL episodes are
  if examples and any(isinstance(e, sft_dataset.Episode) for e in examples):
    episodes = sft_episodes.episodes_section(sections["episodes"], sft.dataset)
  run = run_sections(config)
  # an episodes cold start trains with the RL run's tokenizer (call_vocab for the tiny model)
  ctx = setup_run(config, workdir, sections=run,
                  tokenizer=trainer_rounds.tokenizer_for(sections["episodes"]))
  render_episode = sft_episodes.renderer(episodes, ctx.tokenizer) if episodes else None
  if sft.row_multiple % ctx.batch_divisor():
    field = "sft.pack_row_multiple" if sft.packing else "sft.batch_size"
    raise ConfigError(field, sft.row_multiple, f"rows per batch must be a multiple of the mesh "
                      f"batch axes ({ctx.batch_divisor()})")
  mixture = TaskMixture(tasks, run.seed)
  optimizer = make_optimizer(opt)
  shardings = state_lib.state_shardings(ctx.model_config, optimizer, ctx.mesh, ctx.rules,
                                        sft.lora)
  batch_sharding = {k: sharding.batch_sharding(ctx.mesh, ctx.rules, 2) for k in sft.batch_keys}
  step_fn = jit_train_step(
      make_train_step(make_sft_loss(ctx.model_config, mesh_lib.context_mesh(ctx.mesh), sft),
                      optimizer),
      shardings, batch_sharding)
  fault_log = FaultLog(workdir)
  injector = FaultInjector(sections["faults"], fault_log)
  guard = NonFiniteGuard(sections["guard"], fault_log)
  checkpoints = CheckpointManager(os.path.join(workdir, "checkpoints"), max_to_keep=2,
                                  on_event=fault_log.record)

  def fresh_state():
    return state_lib.create_train_state(ctx.model_config, optimizer, ctx.mesh, ctx.rules,
                                        ctx.key("init"),
                                        params=pretrained_params(ctx, sft.lora, "sft.lora"),
                                        lora=sft.lora, donate=True)

  def restore_latest():
    """The newest good checkpoint's state, or the initial one."""
    if checkpoints.latest_step() is None:
      return fresh_state()
    abstract = state_lib.abstract_state(ctx.model_config, optimizer, ctx.mesh, ctx.rules,
                                        sft.lora)
    try:
      restored, extra = checkpoints.restore(abstract, fallback=True)
    except CorruptCheckpointError as e:  # all moved aside to checkpoints/corrupt/
      logging.warning("%s\nstarting again from the initial state", e)
      return fresh_state()
    except CheckpointMismatchError as e:
      raise mismatched_checkpoints(workdir, config, e, checkpoints.read_extra(),
                                   ctx.tokenizer) from None
    if "rl_step" in extra:  # an RL run's state has the same tree as SFT's
      raise ConfigError("--workdir", workdir, "holds an RL run's checkpoints; SFT needs a "
                        "workdir of its own")
    tokenizer_fingerprint.check(extra.get("tokenizer"), ctx.tokenizer, "--workdir", workdir,
                                run.tokenizer_path)
    return restored

  # saved with every step: the run's kind (an RL trainer refuses them) and tokenizer
  saved_extra = {"run": "sft", "tokenizer": tokenizer_fingerprint.of(ctx.tokenizer)}
  state = restore_latest()
  start = int(state.step)
  check_not_past(start, sft.num_steps, "sft.num_steps", workdir)
  ctx.write_config(start)  # after the restore: a workdir the config does not fit keeps its own
  if start:
    logging.info("resumed SFT at step %d", start)
  writer = MetricWriter(workdir, truncate_after_step=start)
  timer = StepTimer()
  metrics = {}
  preempt = SigtermFlag().__enter__()
  it = start
  try:
    while it < sft.num_steps:
      with timer("step"):
        batch, dropped = demonstration_batch(mixture, ctx.tokenizer, it, sft, examples,
                                             run.seed, render_episode)
        _check_dropped(dropped, it + 1, sft)
        state, metrics = step_fn(state, process_data.put_batch(batch, batch_sharding))
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
      if guard.observe(it + 1, int(metrics["guard/skipped"])):
        state = restore_latest()
        guard.rolled_back(it + 1, int(state.step))
        logging.warning("sft step %d: rolled back to step %d", it + 1, int(state.step))
        writer.truncate_after(int(state.step))
        timer.reset()
        it = int(state.step)
        continue
      metrics.update(timer.metrics(), **{"data/dropped_examples": dropped})
      metrics.update(guard.metrics(), **fault_log.metrics())
      timer.reset()
      done = it + 1
      writer.write(done, metrics)
      if done % 50 == 0 or done == sft.num_steps:
        logging.info("sft step %d: loss %.4f acc %.3f", done, metrics["loss"],
                     metrics["token_accuracy"])
      if done % sft.checkpoint_every == 0 or done == sft.num_steps:
        checkpoints.save(done, state, extra=saved_extra, force=True)
        injector.after_checkpoint(done, checkpoints.directory, checkpoints.wait_until_finished)
      injector.after_step(done)
      it = done
      if preempt.requested and it < sft.num_steps:
        if checkpoints.latest_step() != done:
          checkpoints.save(done, state, extra=saved_extra, force=True)
        fault_log.record("sigterm_checkpointed", done)
        logging.warning("SIGTERM: saved checkpoint at step %d; exiting", done)
        break
  finally:
    preempt.__exit__()
    checkpoints.close()
    writer.close()
  if it < sft.num_steps:  # stopped by SIGTERM; no export yet
    return {"state": state, "metrics": metrics, "export_dir": None, "context": ctx,
            "preempted": True}
  export = save_params(os.path.join(workdir, EXPORT_DIR), ctx.model_config,
                       state_lib.model_params(state, sft.lora), tokenizer=ctx.tokenizer)
  if state.frozen is not None:  # the adapters alone, as `peft` loads them
    peft.save_adapter(os.path.join(export, peft.ADAPTER_DIR), ctx.model_config, state.params,
                      sft.lora)
  return {"state": state, "metrics": metrics, "export_dir": export, "context": ctx}
