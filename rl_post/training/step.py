"""The generic jitted, sharded, donated update step shared by SFT and RL."""

import functools
from typing import Any, Callable

import jax
import optax

from rl_post.training import guard
from rl_post.training.state import TrainState

LossFn = Callable[[Any, dict, jax.Array], tuple[jax.Array, dict]]


def make_train_step(loss_fn: LossFn, optimizer: optax.GradientTransformation):
  """Returns the pure `train_step(state, batch) -> (state, metrics)`.

  An update with a non-finite loss or gradient norm is skipped: params and
  optimizer state come back unchanged, `step` still advances (it counts
  steps taken, so a resumed loop stays on its data), and
  `metrics["guard/skipped"]` is 1.0, as it is for a non-finite update norm
  (see `rl_post.training.guard.apply_if`).

  With LoRA (`state.frozen` holds the base), `state.params` are the adapters:
  they alone are differentiated and updated, and `loss_fn` is called with
  `frozen=state.frozen` as a keyword.

  Args:
    loss_fn: `(params, batch, rng[, frozen=]) -> (loss, metrics)`, pure.
    optimizer: the optax transformation that created `state.opt_state`.
  """

  def train_step(state: TrainState, batch: dict):
    rng = jax.random.fold_in(state.rng, state.step)
    loss = loss_fn if state.frozen is None else functools.partial(loss_fn, frozen=state.frozen)
    (loss, metrics), grads = jax.value_and_grad(loss, has_aux=True)(state.params, batch, rng)
    grad_norm = optax.tree.norm(grads)
    # decided before the update, which then runs in place (guard.apply_if)
    ok = guard.all_finite(loss, grad_norm)
    params, opt_state, update_norm = guard.apply_if(ok, optimizer, grads, state.opt_state,
                                                    state.params)
    metrics = dict(metrics, loss=loss, grad_norm=grad_norm, update_norm=update_norm)
    metrics["guard/skipped"] = 1.0 - guard.all_finite(ok, update_norm).astype(loss.dtype)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def jit_train_step(train_step, state_shardings: TrainState, batch_shardings):
  """Compiles `train_step` with explicit shardings and a donated state."""
  return jax.jit(train_step, in_shardings=(state_shardings, batch_shardings),
                 out_shardings=(state_shardings, None), donate_argnums=0)
