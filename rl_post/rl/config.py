"""GRPO-family algorithm settings (the `rl` config section)."""

import dataclasses

from rl_post.config_sections import check
from rl_post.rl import algos


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """Group Relative Policy Optimization and its variants.

  Attributes:
    num_steps: RL iterations (each: sample, score, update).
    batch_size: B, prompts per iteration.
    num_generations: G, responses per prompt (the group).
    max_prompt_len: P, prompt token budget.
    max_new_tokens: response token budget.
    temperature: sampling temperature of the behaviour policy.
    kl_coef: beta, weight of KL(pi_theta || pi_ref); 0 skips the reference.
    kl_estimator: "k1" | "k2" | "k3".
    clip_low, clip_high: epsilon_low / epsilon_high of the clipped ratio
      (DAPO's clip-higher uses clip_high > clip_low).
    aggregation: "token_mean" (DAPO) | "sequence_mean" (GRPO) |
      "sequence_sum_norm" (Dr. GRPO).
    advantage_scale: "std" (GRPO) | "none" (Dr. GRPO).
    num_epochs: mu, passes over each batch of rollouts.
    num_minibatches: updates per epoch.
    ref_dtype: storage dtype of the frozen reference params.
    eval_every: held-out evaluation period in steps (0: only at the end).
    checkpoint_every: checkpoint period in steps.
    init_from: directory of exported SFT params ("" = fresh init).
    prompt_buckets: prompt widths generation pads to (the smallest that
      fits the batch's longest prompt); () = the sampler's powers of two.
      (max_prompt_len,) gives one compiled shape for every batch of a
      mixture whose prompt lengths vary (sql schemas next to short sums).
  """
  num_steps: int = 100
  batch_size: int = 16
  num_generations: int = 8
  max_prompt_len: int = 32
  max_new_tokens: int = 64
  temperature: float = 1.0
  kl_coef: float = 0.0
  kl_estimator: str = "k3"
  clip_low: float = 0.2
  clip_high: float = 0.2
  aggregation: str = "token_mean"
  advantage_scale: str = "std"
  num_epochs: int = 1
  num_minibatches: int = 1
  ref_dtype: str = "float32"
  eval_every: int = 0
  checkpoint_every: int = 20
  init_from: str = ""
  prompt_buckets: tuple[int, ...] = ()

  def __post_init__(self):
    check(self.num_steps >= 0, "num_steps", "must be >= 0", self.num_steps)
    check(self.batch_size > 0, "batch_size", "must be > 0", self.batch_size)
    check(self.num_generations >= 2, "num_generations",
          "must be >= 2 (group advantages need a group)", self.num_generations)
    check(self.max_prompt_len > 0, "max_prompt_len", "must be > 0", self.max_prompt_len)
    check(self.max_new_tokens > 0, "max_new_tokens", "must be > 0", self.max_new_tokens)
    check(self.temperature > 0, "temperature", "must be > 0", self.temperature)
    check(self.kl_coef >= 0, "kl_coef", "must be >= 0", self.kl_coef)
    check(self.kl_estimator in algos.KL_ESTIMATORS, "kl_estimator",
          f"must be one of {algos.KL_ESTIMATORS}", self.kl_estimator)
    check(0 <= self.clip_low < 1, "clip_low", "must be in [0, 1)", self.clip_low)
    check(self.clip_high >= 0, "clip_high", "must be >= 0", self.clip_high)
    check(self.aggregation in algos.AGGREGATIONS, "aggregation",
          f"must be one of {algos.AGGREGATIONS}", self.aggregation)
    check(self.advantage_scale in algos.SCALES, "advantage_scale",
          f"must be one of {algos.SCALES}", self.advantage_scale)
    check(self.num_epochs >= 1, "num_epochs", "must be >= 1", self.num_epochs)
    check(self.num_minibatches >= 1, "num_minibatches", "must be >= 1", self.num_minibatches)
    check((self.batch_size * self.num_generations) % self.num_minibatches == 0,
          "num_minibatches", f"must divide batch_size * num_generations "
          f"({self.batch_size * self.num_generations})", self.num_minibatches)
    check(self.ref_dtype in ("float32", "bfloat16"), "ref_dtype",
          "must be float32 or bfloat16", self.ref_dtype)
    check(self.eval_every >= 0, "eval_every", "must be >= 0", self.eval_every)
    check(self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1", self.checkpoint_every)
    check(list(self.prompt_buckets) == sorted(set(self.prompt_buckets))
          and all(isinstance(b, int) and b > 0 for b in self.prompt_buckets)
          and (not self.prompt_buckets or self.prompt_buckets[-1] >= self.max_prompt_len),
          "prompt_buckets", "must be strictly increasing positive ints, the last >= "
          f"max_prompt_len ({self.max_prompt_len}), or empty", self.prompt_buckets)

  @property
  def rollouts_per_step(self) -> int:
    return self.batch_size * self.num_generations

  @property
  def updates_per_step(self) -> int:
    return self.num_epochs * self.num_minibatches
