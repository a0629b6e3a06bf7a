"""The `rl` config section: run settings, the algorithm's name, its settings.

  c.rl.algorithm = "ppo"           # any name in rl_post.rl.registry
  c.rl.ppo.gae_lambda = 0.9        # that algorithm's own sub-section
  add_algorithm(c.rl, "my_pkg.algos:BEST_OF_GROUP")  # one from outside: rl.best_of_group

`section_defaults()` is the whole section with every default (what
`configs/base.py` holds); `load(section)` validates it, including the
sub-sections of algorithms not chosen, and returns an `RLConfig` whose
`algo` is the chosen algorithm's frozen config.
"""

import dataclasses
from typing import Any

from rl_post.config_sections import check, from_section
from rl_post.models.lora import LoraConfig
from rl_post.rl import registry
from rl_post.models.logprobs import REMAT_POLICIES
from rl_post.sampling.low_precision import PRECISIONS as ROLLOUT_PRECISIONS

PROCESS_CREDIT = ("sequence", "token")


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """Settings of an RL run shared by every algorithm.

  Attributes:
    algorithm: name of the registry entry ("grpo", "ppo", ...) or the import
      path "package.module:ATTR" of an Algorithm (or of a callable returning
      one), registered on first use (rl/registry.py).
    num_steps: RL iterations (each: sample, score, update).
    batch_size: B, prompts per iteration.
    num_generations: G, responses per prompt (the group).
    max_prompt_len: P, prompt token budget.
    max_new_tokens: L_max, response token budget.
    temperature: sampling temperature of the behaviour policy.
    num_epochs: mu, passes over each batch of rollouts.
    num_minibatches: optimizer updates per epoch.
    grad_accum: micro-batches per minibatch; gradients are summed over them
      (same update as one big batch, lower peak memory).
    logprob_chunk: positions per chunk of the log-softmax over the vocabulary.
    logprob_remat: recompute each chunk's logits in the update's backward
      (True: one chunk's [rows, chunk, V] alive at a time); False keeps
      every chunk's logits and probabilities from the forward (about
      2 x [rows, T, V] f32 more memory) and spares the head's matmul a
      second pass: for small vocabularies and short responses.
    remat: rematerialisation of the layers in the update: "none" | "full" |
      "dots" (keep matmul outputs).
    unroll_layers: layers per iteration of the update's loop over layers
      (1: a compact loop; >= model.num_layers: straight-line code, which
      spares XLA:CPU the loop's stacked residuals and in-loop transposes,
      hence faster updates on the 4-layer benchmark model, measured by
      `experiments/benchmarks/update_settings.py` (docs/algorithms.md), at
      the cost of compile time that grows with the number of layers).
    ref_dtype: storage dtype of the frozen reference params.
    eval_every: held-out evaluation period in steps (0: only at the end).
    eval_at_end: evaluate the held-out set after the last step (off where the
      caller evaluates the exported params itself, as the demo pipelines do).
    checkpoint_every: checkpoint period in steps.
    init_from: directory of exported SFT params ("" = fresh init).
    async_rewards: score batch t on the reward pool while batch t+1 is
      generated (rl/async_rewards.py); incompatible with dynamic filtering.
    async_staleness: with async_rewards, how many updates a batch may lag
      the policy that sampled it (0 = the synchronous order and numbers).
    overlap_update: generate iteration t + 1's rollout (with async_rewards:
      every rollout up to t + 1 + async_staleness) while update t runs, with
      the params from before update t (rl/overlap_update.py): a batch lags
      the policy that trains on it by at most k = 1 + (async_staleness if
      async_rewards else 0) updates, logged per step as `async/staleness`.
      The sampler keeps its own copy of the policy params while the update
      runs (the update donates the state; `overlap/sampler_params_gib`).
      The iteration right after each periodic checkpoint is not overlapped,
      so resume is exact; with checkpoint_every = 1 the run equals the
      synchronous one. On one device the generation's programs still run
      after the update's (dispatch order): the overlap hides host work.
      Needs metrics_one_step_late (else the update is awaited at once) and
      no dynamic filtering.
    compute_dtype: dtype of the model's activations and matmuls in the RL
      run ("" = model.dtype); params and optimizer state stay in
      model.param_dtype, log-softmax in float32 (rl_post/training/precision.py).
    peak_flops: the accelerator's peak FLOP/s for the per-step MFU metric
      (0 = no MFU metric).
    metrics_one_step_late: read step t's update metrics (loss, guard flag)
      after step t+1's rollout, so the device runs the update while the
      host does step t's bookkeeping and dispatches the next rollout; the
      guard, metrics, eval and checkpoint of step t still come before
      step t+1's update. False: read them right after the update (the
      exact rollout/update time split).
    shared_prefix: in the update and the reference forward, run the leading
      positions the G rows of each group share (the prompt) through the
      layers once per group instead of once per row, so the layers do
      B*P + B*G*L_max rows of work instead of B*G*(P + L_max). The same
      numbers up to float rounding; minibatches keep whole groups (shuffled
      by group), so `minibatch_size / grad_accum` must be a multiple of G.
      The shared length is found per batch and rounded down to a rung of
      `prefix_buckets` (one compiled update per rung reached). Single
      process; not with context parallelism or episodes.
    prefix_buckets: with shared_prefix, the shared lengths the update compiles
      for (a batch uses the largest <= its own); () = 8, 16, 24, 32, 48, 64,
      96, ... (rl/shape_buckets.py). Fewer rungs: fewer programs, less
      prefix run once per group.
    lora: LoRA adapters (`rl_post.models.lora.LoraConfig`; rank 0 = off): when
      on, only the adapters train and the optimizer holds only them; the
      reference for the KL term is the base with adapters off (no copy);
      dropout must be 0 (the update's log-probs must equal the sampler's).
    algo: the chosen algorithm's config (set by `load`, not a section field).
    rollout_precision: the weights the sampler reads: "float32" (the masters
      themselves, the default), "bfloat16" or "int8" (weight-only), a copy
      made from the masters for each round of generation
      (rl_post/sampling/low_precision.py). Other than float32, the trainer
      recomputes the masters' log-probs of the sampled tokens, uses them as
      the ratio's old log-probs and reports the gap (`offpolicy/*`).
    tis_cap: C > 0 weights each token's policy-gradient term by the truncated
      importance weight min(pi_old / mu, C) against the behaviour policy mu
      (the sampler's log-probs); 0 = off (rl_post/rl/off_policy.py).
    mis_low, mis_high: with mis_high > 0, tokens whose pi_old / mu lies
      outside [mis_low, mis_high] are masked out of the policy-gradient
      term; mis_high = 0 = off.
    process_credit: where the `process` reward component (the verifier's
      step scores, e.g. arithmetic's column checks, times its weight in
      `rewards.weights`) goes: "sequence" adds it to the sequence's reward;
      "token" splits it over the response's steps, each step's share
      (proportional to its score) on the step's last token, so estimators
      with per-token returns (REINFORCE++, PPO) credit each step only for
      what follows it. Sequence estimators (GRPO, RLOO) sum the tokens back
      and see the same rewards either way. Not with episodes.
    width_multiple: the update runs the rollout cut where its last row ends
      (last response token or prompt), rounded up to a multiple of this, instead of
      the full prompt bucket + max_new_tokens: the positions cut are
      padding in every row, so the numbers are those of the full width up
      to float rounding, and each width compiles once. 0 = always the full
      width. Not with context parallelism (the full width is kept).
    prompt_buckets: prompt widths generation pads to (the smallest that
      fits the batch's longest prompt); () = the sampler's powers of two.
      (max_prompt_len,) gives one compiled shape for every batch of a
      mixture whose prompt lengths vary (sql schemas next to short sums).
    sampler_devices: n > 0 runs generation on a mesh of its own: the
      process's last n devices (the trainer keeps the others), both meshes
      laying out the `mesh` section (its -1 axis resolved against each
      mesh's devices) with the one rules table; after each update the
      policy params are handed over to the sampler mesh (a device_put with
      its shardings), and with overlap_update the next rollout generates
      there while the update runs (rl/sampler_mesh.py;
      `overlap/handover_gib`, `overlap/handover_s`). 0 = one mesh for both.
      One process, mesh.context = 1 and single-turn rounds only.
    rollout_source: where rollouts come from (`rl_post.rl.rollout_source`):
      "single_turn", "episodes", or "module:Class" of a `RolloutSource`
      subclass; "" = episodes when the `episodes` section is enabled, else
      single-turn.
  """
  algorithm: str = "grpo"
  num_steps: int = 100
  batch_size: int = 16
  num_generations: int = 8
  max_prompt_len: int = 32
  max_new_tokens: int = 64
  temperature: float = 1.0
  num_epochs: int = 1
  num_minibatches: int = 1
  grad_accum: int = 1
  logprob_chunk: int = 32
  logprob_remat: bool = True
  remat: str = "none"
  unroll_layers: int = 1
  ref_dtype: str = "float32"
  eval_every: int = 0
  eval_at_end: bool = True
  checkpoint_every: int = 20
  init_from: str = ""
  async_rewards: bool = False
  async_staleness: int = 1
  overlap_update: bool = False
  compute_dtype: str = ""
  peak_flops: float = 0.0
  metrics_one_step_late: bool = True
  shared_prefix: bool = False
  algo: Any = None
  prompt_buckets: tuple[int, ...] = ()
  prefix_buckets: tuple[int, ...] = ()
  process_credit: str = "sequence"
  width_multiple: int = 16
  lora: LoraConfig = LoraConfig()
  rollout_precision: str = "float32"
  tis_cap: float = 0.0
  mis_low: float = 0.0
  mis_high: float = 0.0
  rollout_source: str = ""
  sampler_devices: int = 0

  def __post_init__(self):
    if not isinstance(self.lora, LoraConfig):
      object.__setattr__(self, "lora", from_section(LoraConfig, self.lora, "rl.lora"))
    check(self.lora.dropout == 0, "lora.dropout", "must be 0 in RL (dropout would make the "
          "update's log-probs differ from the sampler's)", self.lora.dropout)
    alg = registry.get(self.algorithm)
    check(self.num_steps >= 0, "num_steps", "must be >= 0", self.num_steps)
    check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
    check(self.num_generations >= alg.min_group_size, "num_generations",
          f"must be >= {alg.min_group_size} for {self.algorithm} (its advantages need a group)",
          self.num_generations)
    check(self.max_prompt_len > 0, "max_prompt_len", "must be > 0", self.max_prompt_len)
    check(self.max_new_tokens > 0, "max_new_tokens", "must be > 0", self.max_new_tokens)
    check(self.temperature > 0, "temperature", "must be > 0", self.temperature)
    check(self.num_epochs >= 1, "num_epochs", "must be >= 1", self.num_epochs)
    check(self.num_minibatches >= 1, "num_minibatches", "must be >= 1", self.num_minibatches)
    check(self.rollouts_per_step % self.num_minibatches == 0, "num_minibatches",
          f"must divide batch_size * num_generations ({self.rollouts_per_step})",
          self.num_minibatches)
    check(self.grad_accum >= 1, "grad_accum", "must be >= 1", self.grad_accum)
    check(self.minibatch_size % self.grad_accum == 0, "grad_accum",
          f"must divide the minibatch size ({self.minibatch_size})", self.grad_accum)
    check(self.logprob_chunk >= 1, "logprob_chunk", "must be >= 1", self.logprob_chunk)
    check(isinstance(self.logprob_remat, bool), "logprob_remat", "must be a bool",
          self.logprob_remat)
    check(self.remat in REMAT_POLICIES, "remat", f"must be one of {REMAT_POLICIES}",
          self.remat)
    check(isinstance(self.unroll_layers, int) and self.unroll_layers >= 1, "unroll_layers",
          "must be an int >= 1", self.unroll_layers)
    check(self.ref_dtype in ("float32", "bfloat16"), "ref_dtype",
          "must be float32 or bfloat16", self.ref_dtype)
    check(self.eval_every >= 0, "eval_every", "must be >= 0", self.eval_every)
    check(self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1", self.checkpoint_every)
    check(isinstance(self.async_rewards, bool), "async_rewards", "must be a bool",
          self.async_rewards)
    check(isinstance(self.async_staleness, int) and self.async_staleness >= 0,
          "async_staleness", "must be an int >= 0", self.async_staleness)
    check(isinstance(self.overlap_update, bool), "overlap_update", "must be a bool",
          self.overlap_update)
    check(not self.overlap_update or self.metrics_one_step_late is True, "overlap_update",
          "needs rl.metrics_one_step_late=True (otherwise each update is awaited as soon "
          "as it is dispatched, and nothing can run beside it)", self.overlap_update)
    check(self.compute_dtype in ("", "float32", "bfloat16"), "compute_dtype",
          'must be "", "float32" or "bfloat16"', self.compute_dtype)
    check(self.peak_flops >= 0, "peak_flops", "must be >= 0 (0 = no MFU)", self.peak_flops)
    check(isinstance(self.metrics_one_step_late, bool), "metrics_one_step_late",
          "must be a bool", self.metrics_one_step_late)
    check(isinstance(self.shared_prefix, bool), "shared_prefix", "must be a bool",
          self.shared_prefix)
    if self.shared_prefix:
      check(self.num_generations >= 2, "shared_prefix",
            "needs num_generations >= 2 (a group shares its prompt)", self.shared_prefix)
      check((self.minibatch_size // self.grad_accum) % self.num_generations == 0,
            "shared_prefix", f"needs whole groups per micro-batch: minibatch_size / grad_accum "
            f"({self.minibatch_size // self.grad_accum}) must be a multiple of num_generations "
            f"({self.num_generations})", self.shared_prefix)
    check(isinstance(self.width_multiple, int) and self.width_multiple >= 0, "width_multiple",
          "must be an int >= 0 (0 = the rollout's full width)", self.width_multiple)
    check(isinstance(self.sampler_devices, int) and not isinstance(self.sampler_devices, bool)
          and self.sampler_devices >= 0, "sampler_devices",
          "must be an int >= 0 (0 = one mesh for sampler and trainer)", self.sampler_devices)
    check(isinstance(self.rollout_source, str), "rollout_source",
          'must be a name or "module:Class"', self.rollout_source)
    check(self.process_credit in PROCESS_CREDIT, "process_credit",
          f"must be one of {PROCESS_CREDIT}", self.process_credit)
    check(self.rollout_precision in ROLLOUT_PRECISIONS, "rollout_precision",
          f"must be one of {ROLLOUT_PRECISIONS}", self.rollout_precision)
    check(self.tis_cap >= 0, "tis_cap", "must be >= 0 (0 = off)", self.tis_cap)
    check(self.mis_high >= 0, "mis_high", "must be >= 0 (0 = off)", self.mis_high)
    check(self.mis_high == 0 or 0 <= self.mis_low < 1 < self.mis_high, "mis_low",
          "and rl.mis_high must satisfy 0 <= mis_low < 1 < mis_high (mis_high = 0: off)",
          (self.mis_low, self.mis_high))
    if self.algo is None:
      object.__setattr__(self, "algo", alg.config_cls())
    check(isinstance(self.algo, alg.config_cls), "algo",
          f"must be a {alg.config_cls.__name__}", self.algo)
    check(list(self.prompt_buckets) == sorted(set(self.prompt_buckets))
          and all(isinstance(b, int) and b > 0 for b in self.prompt_buckets)
          and (not self.prompt_buckets or self.prompt_buckets[-1] >= self.max_prompt_len),
          "prompt_buckets", "must be strictly increasing positive ints, the last >= "
          f"max_prompt_len ({self.max_prompt_len}), or empty", self.prompt_buckets)
    check(list(self.prefix_buckets) == sorted(set(self.prefix_buckets))
          and all(isinstance(b, int) and b > 0 for b in self.prefix_buckets),
          "prefix_buckets", "must be strictly increasing positive ints, or empty",
          self.prefix_buckets)

  @property
  def rollouts_per_step(self) -> int:
    return self.batch_size * self.num_generations

  @property
  def minibatch_size(self) -> int:
    return self.rollouts_per_step // self.num_minibatches

  @property
  def updates_per_step(self) -> int:
    return self.num_epochs * self.num_minibatches

  @property
  def entry(self):
    """The chosen `rl_post.rl.algorithm.Algorithm`."""
    return registry.get(self.algorithm)

  @property
  def needs_reference(self) -> bool:
    return self.algo.kl_coef > 0

  @property
  def uses_critic(self) -> bool:
    return self.entry.uses_critic

  @property
  def corrects_off_policy(self) -> bool:
    """The update weights tokens against the behaviour policy (TIS or MIS)."""
    return self.tis_cap > 0 or self.mis_high > 0

  @property
  def recomputes_logp(self) -> bool:
    """The trainer recomputes the old log-probs instead of taking the sampler's."""
    return self.rollout_precision != "float32" or self.corrects_off_policy


def section_defaults() -> dict:
  """The full `rl` section: run defaults plus one sub-section per algorithm."""
  run = {f.name: f.default for f in dataclasses.fields(RLConfig) if f.name != "algo"}
  run["lora"] = LoraConfig.section_defaults()
  return dict(run, **registry.algorithm_defaults())


def load(section) -> RLConfig:
  """Validated `RLConfig` from the `rl` section (a ConfigDict or dict).

  Raises:
    ValueError: "rl.<field> ..." or "rl.<algorithm>.<field> ..." for unknown
      fields and bad values, in the chosen algorithm or any other.
  """
  values = dict(section or {})
  if "algo" in values:
    raise ValueError("rl: unknown field(s) ['algo']; set rl.algorithm and rl.<algorithm>")
  chosen = registry.get(values.get("algorithm", RLConfig.algorithm))  # imports a path
  configs = {name: from_section(registry.get(name).config_cls, values.pop(name, None),
                                f"rl.{name}") for name in registry.names()}
  run = from_section(RLConfig, values, "rl")
  return dataclasses.replace(run, algo=configs[chosen.name])


def add_algorithm(section, algorithm: str) -> str:
  """Chooses `algorithm` (a name or "package.module:ATTR") in the `rl` section
  (a ConfigDict or dict) and adds its sub-section with its defaults where
  missing, so a config file can set, and the command line override, its
  fields (`--config.rl.<name>.<field>=...`). Returns its name."""
  entry = registry.get(algorithm)
  section["algorithm"] = algorithm
  if entry.name not in section:
    section[entry.name] = dataclasses.asdict(entry.config_cls())
  return entry.name
