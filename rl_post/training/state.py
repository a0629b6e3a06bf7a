"""Train state and its sharded creation.

`TrainState` is the whole mutable state of a run: restoring it (plus the
step-indexed data streams) resumes a run exactly.
"""

from typing import Any

import flax.struct
import jax

from rl_post import models
from rl_post.parallel import sharding
from rl_post.training.optimizer import opt_state_shardings


@flax.struct.dataclass
class TrainState:
  step: jax.Array      # int32 scalar: optimizer updates done
  params: Any          # nested dict of arrays
  opt_state: Any       # optax state
  rng: jax.Array       # typed PRNG key; per-step keys are fold_in(rng, step)
  critic: Any = None            # RL critic params (PPO), see rl_post.rl.critic
  critic_opt_state: Any = None  # the critic's own optax state


def param_shardings(model_config, mesh, rules):
  """NamedShardings for the model's params from the logical-axis rules."""
  return sharding.tree_shardings(models.param_logical_axes(model_config),
                                 models.abstract_params(model_config), mesh, rules)


def abstract_sharded_params(model_config, mesh, rules):
  """Params as ShapeDtypeStructs carrying their shardings (a restore target)."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      models.abstract_params(model_config),
                      param_shardings(model_config, mesh, rules))


def state_shardings(model_config, optimizer, mesh, rules) -> TrainState:
  """A TrainState of NamedShardings: optimizer moments follow their params."""
  abstract = models.abstract_params(model_config)
  params_sh = param_shardings(model_config, mesh, rules)
  abstract_opt = jax.eval_shape(optimizer.init, abstract)
  replicated = sharding.replicated(mesh)
  opt_sh = opt_state_shardings(optimizer, abstract_opt, params_sh, replicated)
  return TrainState(step=replicated, params=params_sh, opt_state=opt_sh, rng=replicated)


def abstract_state(model_config, optimizer, mesh, rules) -> TrainState:
  """ShapeDtypeStructs with shardings: the target for checkpoint restore."""
  shardings = state_shardings(model_config, optimizer, mesh, rules)
  shapes = jax.eval_shape(lambda: _fresh_state(model_config, optimizer, jax.random.key(0)))
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      shapes, shardings)


def _fresh_state(model_config, optimizer, rng, params=None):
  init_rng, state_rng = jax.random.split(rng)
  if params is None:
    params = models.init_params(model_config, init_rng)
  return TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=params,
                    opt_state=optimizer.init(params), rng=state_rng)


def create_train_state(model_config, optimizer, mesh, rules, rng, params=None) -> TrainState:
  """Initialises (or wraps `params` into) a TrainState placed on `mesh`.

  Parameters are created directly in their shardings: init runs under
  `jax.jit` with `out_shardings`, so no host ever holds the whole model.
  """
  shardings = state_shardings(model_config, optimizer, mesh, rules)
  if params is not None:
    params = jax.device_put(params, shardings.params)
  init = jax.jit(lambda r, p: _fresh_state(model_config, optimizer, r, p),
                 out_shardings=shardings)
  return init(rng, params)
