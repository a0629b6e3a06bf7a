"""The generic jitted, sharded, donated update step shared by SFT and RL."""

from typing import Any, Callable

import jax
import optax

from rl_post.training import guard
from rl_post.training.state import TrainState

LossFn = Callable[[Any, dict, jax.Array], tuple[jax.Array, dict]]


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation):
  """Returns the pure `train_step(state, batch) -> (state, metrics)`.

  An update with a non-finite loss, gradient norm or update norm is skipped:
  params and optimizer state come back unchanged, `step` still advances
  (it counts steps taken, so a resumed loop stays on its data), and
  `metrics["guard/skipped"]` is 1.0 (see `rl_post.training.guard`).

  Args:
    loss_fn: `(params, batch, rng) -> (loss, metrics)`, pure.
    optimizer: the optax transformation that created `state.opt_state`.
  """

  def train_step(state: TrainState, batch: dict):
    rng = jax.random.fold_in(state.rng, state.step)
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, batch, rng)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    grad_norm, update_norm = optax.tree.norm(grads), optax.tree.norm(updates)
    ok = guard.all_finite(loss, grad_norm, update_norm)
    params, opt_state = guard.select(ok, (params, opt_state), (state.params, state.opt_state))
    metrics = dict(metrics, loss=loss, grad_norm=grad_norm, update_norm=update_norm)
    metrics["guard/skipped"] = 1.0 - ok.astype(loss.dtype)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def jit_train_step(train_step, state_shardings: TrainState, batch_shardings):
  """Compiles `train_step` with explicit shardings and a donated state."""
  return jax.jit(train_step, in_shardings=(state_shardings, batch_shardings),
                 out_shardings=(state_shardings, None), donate_argnums=0)
