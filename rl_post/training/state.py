"""Train state and its sharded creation.

`TrainState` is the whole mutable state of a run: restoring it (plus the
step-indexed data streams) resumes a run exactly.

With LoRA (`rl_post.models.lora`, a `LoraConfig` with rank > 0 passed as
`lora`), `params` are the adapters, the only leaves the optimizer sees, and
`frozen` holds the base model's params, which no step changes: the step
passes them through (donated with the state, so they are never copied).
With `lora.base_quant` set ("int8", "int4", "nf4", "q4_1") the base is
`rl_post.models.quant.quantize_base`'s {"params", "scales"} (+ "codebook"
for 4-bit, "offsets" for q4_1): quantized projections and their f32 scales. A `params` given
already quantized (`rl_post.models.pretrained.load_base`, which the trainers start a
pretrained QLoRA run from, or `rl_post.models.gguf_q4.load_q4_base`) is kept as it is.
"""

from typing import Any

import flax.struct
import jax

from rl_post import models
from rl_post.models import lora as lora_lib
from rl_post.models import quant
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
  frozen: Any = None            # with LoRA: the frozen base params (`params` = adapters)


def _lora_on(lora) -> bool:
  return lora is not None and lora.enabled


def param_shardings(model_config, mesh, rules):
  """NamedShardings for the model's params from the logical-axis rules."""
  return sharding.tree_shardings(models.param_logical_axes(model_config),
                                 models.abstract_params(model_config), mesh, rules)


def abstract_sharded_params(model_config, mesh, rules):
  """Params as ShapeDtypeStructs carrying their shardings (a restore target)."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      models.abstract_params(model_config),
                      param_shardings(model_config, mesh, rules))


def adapter_shardings(model_config, lora, mesh, rules):
  """NamedShardings for LoRA adapters, from their logical axes and the same rules."""
  return sharding.tree_shardings(lora_lib.adapter_logical_axes(model_config, lora),
                                 lora_lib.abstract_adapters(model_config, lora), mesh, rules)


def state_shardings(model_config, optimizer, mesh, rules, lora=None) -> TrainState:
  """A TrainState of NamedShardings: optimizer moments follow their params
  (with `lora` on, the adapters; the frozen base keeps the params' shardings)."""
  params_sh = param_shardings(model_config, mesh, rules)
  frozen_sh = None
  if _lora_on(lora):
    frozen_sh, params_sh = params_sh, adapter_shardings(model_config, lora, mesh, rules)
    if lora.base_quant:  # scales split like their projections (int8: the output dims)
      frozen_sh = sharding.tree_shardings(
          quant.frozen_logical_axes(models.param_logical_axes(model_config), lora.base_quant),
          jax.eval_shape(lambda p: _quantized(p, lora), models.abstract_params(model_config)),
          mesh, rules)
    abstract = lora_lib.abstract_adapters(model_config, lora)
  else:
    abstract = models.abstract_params(model_config)
  abstract_opt = jax.eval_shape(optimizer.init, abstract)
  replicated = sharding.replicated(mesh)
  opt_sh = opt_state_shardings(optimizer, abstract_opt, params_sh, replicated)
  return TrainState(step=replicated, params=params_sh, opt_state=opt_sh, rng=replicated,
                    frozen=frozen_sh)


def abstract_state(model_config, optimizer, mesh, rules, lora=None) -> TrainState:
  """ShapeDtypeStructs with shardings: the target for checkpoint restore."""
  shardings = state_shardings(model_config, optimizer, mesh, rules, lora)
  shapes = jax.eval_shape(lambda: _fresh_state(model_config, optimizer, jax.random.key(0),
                                               lora=lora))
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      shapes, shardings)


def _quantized(params, lora):
  """The frozen base for `lora.base_quant`; `params` already quantized are kept."""
  if quant.is_quantized(params):
    return params
  return quant.quantize_base(params, lora.base_quant, lora.base_quant_block_size)


def _check_quantized_base(params, model_config, lora):
  """Raises a one-line ValueError unless an already quantized base has the
  arrays `lora.base_quant` would make."""
  expected = jax.eval_shape(lambda p: _quantized(p, lora), models.abstract_params(model_config))
  same = jax.tree.structure(params) == jax.tree.structure(expected) and all(
      a.shape == b.shape and a.dtype == b.dtype
      for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(expected)))
  if not same:
    raise ValueError(f"the quantized base params are not what lora.base_quant="
                     f"{lora.base_quant!r} with base_quant_block_size="
                     f"{lora.base_quant_block_size} makes (a GGUF Q4_0 base is int4, a Q4_1 "
                     "one q4_1, both with block 32)")


def _fresh_state(model_config, optimizer, rng, params=None, lora=None):
  init_rng, state_rng = jax.random.split(rng)
  if params is None:
    params = models.init_params(model_config, init_rng)
  frozen = None
  if _lora_on(lora):  # the base is frozen; the adapters (B = 0: the base's outputs) train
    frozen = _quantized(params, lora) if lora.base_quant else params
    params = lora_lib.init_adapters(model_config, lora, jax.random.fold_in(init_rng, 1))
  return TrainState(step=jax.numpy.zeros((), jax.numpy.int32), params=params,
                    opt_state=optimizer.init(params), rng=state_rng, frozen=frozen)


def create_train_state(model_config, optimizer, mesh, rules, rng, params=None,
                       lora=None, donate: bool = False) -> TrainState:
  """Initialises (or wraps `params` into) a TrainState placed on `mesh`.

  Parameters are created directly in their shardings: init runs under
  `jax.jit` with `out_shardings`, so no host ever holds the whole model.
  With `lora` on, `params` (or the fresh init) become the frozen base and
  fresh adapters are what the state trains.

  `donate`: the state takes over `params`' buffers (they are deleted) where
  it keeps them as they are, instead of a copy beside them: a freshly loaded
  checkpoint is then in memory once, never twice. Leave it False for params
  the caller uses again.
  """
  shardings = state_shardings(model_config, optimizer, mesh, rules, lora)
  keeps = True  # the state holds `params` unchanged (not quantized by init)
  if params is not None:
    target = shardings.params
    if _lora_on(lora):
      target = shardings.frozen["params"] if lora.base_quant else shardings.frozen
      keeps = not lora.base_quant
      if quant.is_quantized(params):
        _check_quantized_base(params, model_config, lora)
        target, keeps = shardings.frozen, True
    params = jax.device_put(params, target)
  donated = (1,) if donate and keeps and params is not None else ()
  init = jax.jit(lambda r, p: _fresh_state(model_config, optimizer, r, p, lora),
                 out_shardings=shardings, donate_argnums=donated)
  return init(rng, params)


def model_params(state: TrainState, lora=None):
  """The policy's full params: `state.params`, or with adapters the base (an
  int8 one dequantized) with them merged in (for sampling, evaluation and
  export): new [L]-stacked blocks, and the base's own embedding and final
  norm, which no adapter changes (shared, not copied: the sampler's copy is
  one head's bytes smaller; experiments/benchmarks/step_buffers.py)."""
  if state.frozen is None:
    return state.params
  return _merged(state.frozen, state.params, lora)


@jax.jit
def merged_blocks(frozen, adapters, scale):
  """The [L]-stacked blocks of the base with the adapters merged in (`scale`:
  alpha / r), alone: a jitted function returns fresh buffers even for an input
  it passes through, so the leaves no adapter changes stay out of it."""
  return lora_lib.merge_scaled(quant.base_params(frozen), adapters, scale)["blocks"]


base_params = jax.jit(quant.base_params)  # a LoRA state's base as float params (for the
                                          # reference and a separate critic's trunk)


def _merged(frozen, adapters, lora):
  if not _lora_on(lora):
    raise ValueError("a state with frozen base params needs the run's LoraConfig")
  base = frozen["params"] if quant.is_quantized(frozen) else frozen  # float outside blocks
  return dict(base, blocks=merged_blocks(frozen, adapters, lora.scale))
