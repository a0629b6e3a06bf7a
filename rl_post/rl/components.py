"""What an RL run is built from, once, from its config: the run context,
validated sections, the rollout source, optimizer(s), shardings and the
jitted update, reference and value functions (used by `rl_post.rl.trainer`).

Every section is parsed here, once, into its typed dataclass (`rl_sections`,
the built-in sources' `rollout_source.sections`, `training.run.run_sections`)
and passed down as such. The raw config travels on for two reasons only:
writing workdir/config.json (and naming what a resume changed against the
stored one: `RunContext.config`), and a `module:Class` rollout source, which
is built as `Source(components, config)` so it can read a section of its own.
The `compile` section is applied by `rl_post.cli` before the entry point runs.
"""

import jax
import numpy as np

from rl_post.config_sections import from_section
from rl_post.data import eval_sets
from rl_post.data.mixture import TaskConfig
from rl_post.errors import ConfigError
from rl_post.parallel import mesh as mesh_lib
from rl_post.parallel import process_data, sharding
from rl_post.rewards.scoring import RewardConfig
from rl_post.rl import config as rl_config
from rl_post.rl import critic as critic_lib
from rl_post.rl import filtering, rollout_source, sampler_mesh
from rl_post.rl.train_step import (batch_ndims, make_ref_logprobs, make_rl_train_step,
                                   make_value_fn)
from rl_post.sampling import low_precision
from rl_post.sampling.sampler import SamplingConfig
from rl_post.training import precision
from rl_post.training import state as state_lib
from rl_post.training.faults import FaultsConfig
from rl_post.training.guard import GuardConfig
from rl_post.training.optimizer import OptimizerConfig, make_optimizer
from rl_post.training.run import run_sections, setup_run
from rl_post.training.step import jit_train_step


def rl_sections(config) -> dict:
  """The RL trainer's own config sections, parsed and cross-checked, and those the
  built-in rollout sources read (`rollout_source.sections`): what a run (or the demo
  pipeline, before any stage) validates before it reads inputs or writes files."""
  sections = dict(
      rl=rl_config.load(config.get("rl")),
      tasks=from_section(TaskConfig, config.get("tasks"), "tasks"),
      opt=from_section(OptimizerConfig, config.get("optimizer"), "optimizer"),
      rewards=from_section(RewardConfig, config.get("rewards"), "rewards"),
      filtering=from_section(filtering.FilterConfig, config.get("filtering"), "filtering"),
      guard=from_section(GuardConfig, config.get("guard"), "guard"),
      faults=from_section(FaultsConfig, config.get("faults"), "faults"),
      **rollout_source.sections(config))
  if sections["rl"].async_rewards and sections["filtering"].enabled:
    raise ConfigError("rl.async_rewards", True, "rl.async_rewards needs "
                      "filtering.enabled=False: dynamic sampling must see a round's rewards "
                      "before drawing the next one")
  if sections["rl"].overlap_update and sections["filtering"].enabled:
    raise ConfigError("rl.overlap_update", True, "rl.overlap_update needs "
                      "filtering.enabled=False: its rollouts are launched ahead as one round "
                      "per iteration (rl/overlap_update.py)")
  return sections


def check_context_widths(rl, length_buckets, layout: str, context: int):
  """Ring attention splits the update's width into equal blocks per context shard (two
  per shard in the zigzag layout): every width a rollout can have (a prompt bucket up to
  rl.max_prompt_len's, plus rl.max_new_tokens) must split, or the first update fails."""
  blocks = 2 * context if layout == "zigzag" else context
  reachable = [b for b in length_buckets if b < rl.max_prompt_len] + [
      next((b for b in length_buckets if b >= rl.max_prompt_len), rl.max_prompt_len)]
  bad = sorted({b + rl.max_new_tokens for b in reachable if (b + rl.max_new_tokens) % blocks})
  if bad:
    raise ConfigError("rl.max_new_tokens", rl.max_new_tokens,
                      f"gives rollout widths {bad} (prompt buckets {tuple(reachable)} plus "
                      f"the response) that the {layout} layout over mesh.context={context} "
                      f"cannot split: each must be a multiple of {blocks}")


class RLComponents:
  """Everything the loop needs, built once from the config: each parsed section as an
  attribute (`rl`, `tasks`, `opt`, ..., `run`: the run-wide `RunSections`)."""

  def __init__(self, config, workdir):
    # the trainer's own sections first: a bad value is reported before the run's inputs
    # (tokenizer, mesh, workdir) are looked at
    sections = rl_sections(config)
    for name, section in sections.items():
      setattr(self, name, section)
    rl = self.rl
    source_cls = rollout_source.source_class(rl.rollout_source, sections["episodes"])
    self.run = run_sections(config)
    trainer_devices, sampler_devices = None, None
    if rl.sampler_devices:  # the sampler on the process's last devices (rl/sampler_mesh.py)
      if not source_cls.runs_on_sampler_mesh:
        raise ConfigError("rl.sampler_devices", rl.sampler_devices, f"needs a rollout source "
                          f"that generates on the sampler mesh (single_turn); "
                          f"{source_cls.__name__} does not: set it to 0")
      sampler_mesh.check_single_process(rl.sampler_devices, self.run.distributed)
      trainer_devices, sampler_devices = sampler_mesh.split_devices(
          rl.sampler_devices, jax.devices(), self.run.mesh, jax.process_count())
    self.ctx = ctx = setup_run(config, workdir, sections=self.run,
                               tokenizer=source_cls.tokenizer_for(self, config),
                               devices=trainer_devices)
    # what the step, sampler and evaluation compute in; params keep ctx.model_config's dtype
    self.model_config = precision.compute_config(ctx.model_config, rl.compute_dtype)
    divisor = ctx.batch_divisor()
    minibatch = rl.rollouts_per_step // rl.num_minibatches
    if minibatch % divisor:
      raise ValueError(f"rl: minibatch size {minibatch} (batch_size * num_generations / "
                       f"num_minibatches) must be a multiple of the mesh batch axes ({divisor})")
    buckets = dict(length_buckets=tuple(rl.prompt_buckets)) if rl.prompt_buckets else {}
    self.sampling = SamplingConfig(max_new_tokens=rl.max_new_tokens, temperature=rl.temperature,
                                   **buckets)
    # rl.rollout_precision: the weights and model config the sampler runs (rollouts only)
    self.rollout_copy = low_precision.copy_fn(rl.rollout_precision)
    self.rollout_config = low_precision.sampler_config(self.model_config, rl.rollout_precision)
    self.eval_sampling = SamplingConfig(max_new_tokens=rl.max_new_tokens, greedy=True, **buckets)
    # where generation runs: the trainer's mesh, or one of its own (rl.sampler_devices)
    self.sampler_mesh = sampler_mesh.build(sampler_devices, ctx.mesh, ctx.rules,
                                           ctx.model_config, self.run.mesh,
                                           rl.rollouts_per_step)
    # where rollouts come from: single-turn, episodes, or a "module:Class" of the config's
    # (rl_post/rl/rollout_source.py); its own settings are checked here
    self.source = source_cls(self, config)
    self.mixture = eval_sets.make_mixture(self.tasks, self.run.seed)  # unbuilt: a user error
    self.optimizer = make_optimizer(self.opt)
    mesh, rules = ctx.mesh, ctx.rules
    self.state_shardings = state_lib.state_shardings(ctx.model_config, self.optimizer, mesh,
                                                     rules, rl.lora)
    self.critic_optimizer = None
    if rl.uses_critic:  # the algorithm's extra state: critic params and their optimizer
      self.critic_optimizer = critic_lib.make_critic_optimizer(self.opt,
                                                               rl.algo.critic_learning_rate)
      self.state_shardings = critic_lib.with_critic_shardings(
          self.state_shardings, rl.algo.critic, ctx.model_config, self.critic_optimizer, mesh,
          rules)
    self.batch_sharding = {k: sharding.batch_sharding(mesh, rules, nd)
                           for k, nd in batch_ndims(rl).items()}
    cp_mesh = mesh_lib.context_mesh(mesh)
    if cp_mesh is not None:
      check_context_widths(rl, self.sampling.length_buckets, ctx.model_config.context_layout,
                           dict(zip(mesh.axis_names, mesh.devices.shape))["context"])
    if cp_mesh is not None and rl.shared_prefix:
      raise ConfigError("rl.shared_prefix", True, "does not combine with context parallelism "
                        "(mesh context axis > 1): turn one of them off")
    if rl.shared_prefix and jax.process_count() > 1:
      raise ConfigError("rl.shared_prefix", True, "runs on one process (each process would "
                        "find its own shared length): turn it off for multi-host runs")
    self._cp_mesh, self._step_fns, self._ref_fns = cp_mesh, {}, {}
    # the update's width follows the batch (rl.width_multiple), except where the
    # context axis splits the sequence into fixed blocks
    self.trims_width = bool(rl.width_multiple) and cp_mesh is None
    self.step_fn, self.ref_fn = self.step_fn_for(0), self.ref_fn_for(0)
    if rl.uses_critic:
      self.value_fn = jax.jit(make_value_fn(self.model_config, rl, cp_mesh))

  def step_fn_for(self, prefix_len: int):
    """The jitted update for batches whose groups share `prefix_len` leading tokens
    (`train_step.shared_prefix_len`; 0: every row whole), compiled once per length."""
    if prefix_len not in self._step_fns:
      self._step_fns[prefix_len] = jit_train_step(
          make_rl_train_step(self.model_config, self.rl, self.optimizer, self.critic_optimizer,
                             self._cp_mesh, prefix_len),
          self.state_shardings, self.batch_sharding)
    return self._step_fns[prefix_len]

  def ref_fn_for(self, prefix_len: int):
    """The jitted reference log-probs, like `step_fn_for`."""
    if prefix_len not in self._ref_fns:
      self._ref_fns[prefix_len] = jax.jit(make_ref_logprobs(self.model_config, self.rl,
                                                            self._cp_mesh, prefix_len))
    return self._ref_fns[prefix_len]

  def abstract_state(self):
    """The checkpoint restore target (with the critic when the algorithm has one)."""
    ctx = self.ctx
    abstract = state_lib.abstract_state(ctx.model_config, self.optimizer, ctx.mesh, ctx.rules,
                                        self.rl.lora)
    if self.critic_optimizer is None:
      return abstract
    return critic_lib.with_abstract_critic(abstract, self.state_shardings, self.rl.algo.critic,
                                           ctx.model_config, self.critic_optimizer)

  def policy_params(self, state):
    """The policy's full params, for sampling and evaluation: `state.params`, or
    with LoRA the base with the adapters merged in (a copy, freed with the rollout)."""
    return state_lib.model_params(state, self.rl.lora)

  def reference_params(self, state, ref_params):
    """The frozen reference's params: `ref_params` (a copy made at the start), or
    with LoRA and `rl.ref_dtype` equal to the base's dtype the base itself, read
    from the current state (the state is donated to every update)."""
    if ref_params is None and state.frozen is not None and self.rl.needs_reference:
      # an int8 base: a float copy per rollout, freed with it
      return state_lib.base_params(state.frozen) if self.rl.lora.base_quant else state.frozen
    return ref_params

  def shard(self, tree):
    """A host batch (the same on every process) as global [batch, ...] arrays."""
    return process_data.put_batch(tree, jax.tree.map(lambda x: self._rows(np.ndim(x)), tree))

  def build_rows(self, make_rows, items: list):
    """Global [batch, ...] arrays of `make_rows(items)`, each process building its rows."""
    return process_data.build_local(make_rows, items, self._rows)

  def _rows(self, ndim: int):
    return sharding.batch_sharding(self.ctx.mesh, self.ctx.rules, ndim)
