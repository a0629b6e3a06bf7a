"""Optimizer construction from the `optimizer` config section."""

import dataclasses

import optax

from rl_post.config_sections import check
from rl_post.training import adamw_8bit

SCHEDULES = ("constant", "cosine", "linear")
# Adam's moments: f32, or 8-bit blockwise-quantized (rl_post.training.adamw_8bit).
STATE_DTYPES = ("float32", "int8")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """AdamW with warmup, a decay schedule and global-norm clipping."""
  learning_rate: float = 1e-3
  schedule: str = "cosine"
  warmup_steps: int = 0
  total_steps: int = 1000
  end_lr_fraction: float = 0.1
  b1: float = 0.9
  b2: float = 0.95
  eps: float = 1e-8
  weight_decay: float = 0.0
  grad_clip_norm: float = 1.0
  state_dtype: str = "float32"  # "int8": 8-bit moments (about a quarter of the f32 state)

  def __post_init__(self):
    check(self.learning_rate > 0, "learning_rate", "must be > 0", self.learning_rate)
    check(self.schedule in SCHEDULES, "schedule", f"must be one of {SCHEDULES}", self.schedule)
    check(self.warmup_steps >= 0, "warmup_steps", "must be >= 0", self.warmup_steps)
    check(self.total_steps > 0, "total_steps", "must be > 0", self.total_steps)
    check(0 <= self.end_lr_fraction <= 1, "end_lr_fraction", "must be in [0, 1]",
          self.end_lr_fraction)
    check(0 <= self.b1 < 1 and 0 <= self.b2 < 1, "b1", "and b2 must be in [0, 1)",
          (self.b1, self.b2))
    check(self.weight_decay >= 0, "weight_decay", "must be >= 0", self.weight_decay)
    check(self.grad_clip_norm >= 0, "grad_clip_norm", "must be >= 0 (0 disables)",
          self.grad_clip_norm)
    check(self.state_dtype in STATE_DTYPES, "state_dtype", f"must be one of {STATE_DTYPES}",
          self.state_dtype)


def learning_rate_schedule(config: OptimizerConfig) -> optax.Schedule:
  peak, end = config.learning_rate, config.learning_rate * config.end_lr_fraction
  decay_steps = max(config.total_steps - config.warmup_steps, 1)
  if config.schedule == "constant":
    decay = optax.constant_schedule(peak)
  elif config.schedule == "cosine":
    decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=config.end_lr_fraction)
  else:
    decay = optax.linear_schedule(peak, end, decay_steps)
  if config.warmup_steps == 0:
    return decay
  warmup = optax.linear_schedule(0.0, peak, config.warmup_steps)
  return optax.join_schedules([warmup, decay], [config.warmup_steps])


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
  parts = []
  if config.grad_clip_norm > 0:
    parts.append(optax.clip_by_global_norm(config.grad_clip_norm))
  adamw = adamw_8bit.adamw_8bit if config.state_dtype == "int8" else optax.adamw
  parts.append(adamw(learning_rate_schedule(config), b1=config.b1, b2=config.b2,
                     eps=config.eps, weight_decay=config.weight_decay))
  return optax.chain(*parts)


def opt_state_shardings(optimizer: optax.GradientTransformation, abstract_opt_state,
                        param_shardings, replicated):
  """Shardings of `optimizer`'s state: moments follow their params (8-bit codes too,
  their block scales as `adamw_8bit.moment_sharding` says), the rest is `replicated`."""
  return optax.tree_map_params(optimizer, adamw_8bit.moment_sharding, abstract_opt_state,
                               param_shardings, transform_non_params=lambda _: replicated,
                               is_leaf=adamw_8bit.is_quantized)
