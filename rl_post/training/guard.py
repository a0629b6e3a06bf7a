"""Non-finite guard: skip bad updates, roll back on a streak, stop past a limit.

Inside the jitted step (`rl_post.training.step`), an update whose loss or
gradient norm is NaN/inf is not applied: params and optimizer state stay as
they were (`apply_if`, a `lax.cond` decided before the update) and the step
reports `guard/skipped` = 1, as it does for a non-finite update norm. The loop feeds those flags to `NonFiniteGuard`, which
counts them and, after `max_nonfinite_steps` consecutive iterations with a
skipped update, asks for a rollback to the last good checkpoint; once
`max_rollbacks` rollbacks have not helped it raises `NonFiniteTrainingError`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from rl_post.config_sections import check

SKIPPED = "nonfinite_update_skipped"
ROLLBACK = "rollback"
GAVE_UP = "nonfinite_training_error"


class NonFiniteTrainingError(RuntimeError):
  """Training keeps producing non-finite numbers; rolling back did not help."""


@dataclasses.dataclass(frozen=True)
class GuardConfig:
  """Attributes:
    max_nonfinite_steps: consecutive iterations with a skipped update before
      rolling back to the last good checkpoint.
    max_rollbacks: rollbacks (over the whole run, across restarts) before
      giving up with NonFiniteTrainingError.
  """
  max_nonfinite_steps: int = 3
  max_rollbacks: int = 2

  def __post_init__(self):
    check(isinstance(self.max_nonfinite_steps, int) and self.max_nonfinite_steps >= 1,
          "max_nonfinite_steps", "must be an int >= 1", self.max_nonfinite_steps)
    check(isinstance(self.max_rollbacks, int) and self.max_rollbacks >= 0,
          "max_rollbacks", "must be an int >= 0", self.max_rollbacks)


def all_finite(*scalars: jax.Array) -> jax.Array:
  """bool scalar: every argument is finite."""
  return jnp.all(jnp.stack([jnp.isfinite(x) for x in scalars]))


def select(ok: jax.Array, new, old):
  """`new` where `ok` else `old`, leaf by leaf (same tree structure)."""
  return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)


def apply_if(ok: jax.Array, optimizer: optax.GradientTransformation, grads, opt_state,
             params):
  """(params, opt_state, update_norm): the update applied if `ok`, else unchanged.

  `ok` is decided before the update is formed (from the loss and gradient
  norms) and picks a branch of a `lax.cond`, so the update is written into
  the donated params and optimizer state. Forming the new state first and
  then picking new or old leaf by leaf (`select`, with `ok` from the
  update's own norm) keeps new params and both Adam moments alive next to
  the old ones, which raises XLA:CPU's temp buffer for the update above
  the backward pass's own peak; this way the backward's peak is the
  update's (the update's compiled peak for SmolLM2-135M:
  `experiments/benchmarks/grpo_step.py`, docs/results.md "Update memory").
  A skipped update reports `update_norm` NaN. With finite gradients and a
  finite state AdamW's update is finite (its denominator is >= eps);
  callers still count a non-finite `update_norm` as skipped, so the loop's
  rollback catches an optimizer for which that does not hold.
  """
  def apply(args):
    grads, opt_state, params = args
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_opt_state, optax.tree.norm(updates)

  def keep(args):
    _, opt_state, params = args
    return params, opt_state, jnp.full((), jnp.nan, jnp.float32)

  return jax.lax.cond(ok, apply, keep, (grads, opt_state, params))


class NonFiniteGuard:
  """Host-side bookkeeping of skipped updates and rollbacks.

  Counts come from (and go to) the run's `FaultLog`, so they are cumulative
  over restarts of the same workdir.
  """

  def __init__(self, config: GuardConfig, log):
    self.config = config
    self.log = log
    self.consecutive = 0

  def observe(self, step: int, skipped_updates: int) -> bool:
    """Records iteration `step`'s skipped updates; True: roll back now.

    Raises:
      NonFiniteTrainingError: a rollback is due but max_rollbacks were spent.
    """
    if not skipped_updates:
      self.consecutive = 0
      return False
    self.log.record(SKIPPED, step, updates=int(skipped_updates))
    self.consecutive += 1
    if self.consecutive < self.config.max_nonfinite_steps:
      return False
    if self.rollbacks >= self.config.max_rollbacks:
      message = (
          f"non-finite loss, gradients or updates in {self.consecutive} consecutive steps (up to "
          f"step {step}) after {self.rollbacks} rollbacks (guard.max_rollbacks="
          f"{self.config.max_rollbacks}); lower optimizer.learning_rate or check the "
          "data and rewards. Details: faults.jsonl in the workdir")
      self.log.record(GAVE_UP, step, message=message)
      raise NonFiniteTrainingError(message)
    return True

  def rolled_back(self, step: int, to_step: int) -> None:
    self.log.record(ROLLBACK, step, to_step=int(to_step))
    self.consecutive = 0

  @property
  def rollbacks(self) -> int:
    return self.log.count(ROLLBACK)

  def metrics(self) -> dict[str, float]:
    return {"guard/skipped_steps": float(self.log.count(SKIPPED)),
            "guard/rollbacks": float(self.rollbacks)}
