"""PPO's critic: a scalar value head on the policy trunk, or a separate value model.

Critic params are a nested dict:
  "head"  -> {"w": [E], "b": []}   always (f32, replicated)
  "trunk" -> a model's params      only with critic="separate" (sharded like
                                    the policy, initialised from it)
With critic="head" the head reads the policy's hidden states, so the value
loss (times vf_coef) also trains the shared trunk. Either way the critic
params have their own optimizer state, `TrainState.critic_opt_state`.

Values are aligned like log-probs: values_NxT[:, t] = V(tokens < t), the
value of the state in which token t was chosen; entry 0 is 0.
"""

import dataclasses

import jax
import jax.numpy as jnp

from rl_post.parallel import sharding
from rl_post.models.logprobs import hidden_states
from rl_post.training import state as state_lib
from rl_post.training.optimizer import OptimizerConfig, make_optimizer, opt_state_shardings


def init_critic(critic_kind: str, model_config, policy_params):
  """Fresh critic params: a zero value head (V = 0 at start), plus a trunk copy if separate."""
  head = {"w": jnp.zeros((model_config.embed_dim,), jnp.float32),
          "b": jnp.zeros((), jnp.float32)}
  if critic_kind == "head":
    return {"head": head}
  if critic_kind == "separate":
    return {"head": head, "trunk": jax.tree.map(jnp.copy, policy_params)}
  raise ValueError(f"critic must be 'head' or 'separate', got {critic_kind!r}")


def make_critic_optimizer(opt: OptimizerConfig, learning_rate: float):
  """The `optimizer` section's AdamW and schedule at the critic's learning rate."""
  return make_optimizer(dataclasses.replace(opt, learning_rate=learning_rate))


def value_head(head, h_NxTxE):
  """values_NxT aligned with tokens (entry t from h[:, t-1]); f32."""
  v_NxT = jnp.einsum("nte,e->nt", h_NxTxE.astype(jnp.float32), head["w"]) + head["b"]
  return jnp.concatenate([jnp.zeros_like(v_NxT[:, :1]), v_NxT[:, :-1]], axis=1)


def critic_values(critic_kind: str, model_config, critic, policy_h_NxTxE, tokens_NxT, *,
                  remat: str = "none", context_mesh=None):
  """values_NxT from the policy's hidden states (head) or the critic's own trunk."""
  if critic_kind == "head":
    return value_head(critic["head"], policy_h_NxTxE)
  h_NxTxE = hidden_states(model_config, critic["trunk"], tokens_NxT, remat=remat,
                          context_mesh=context_mesh)
  return value_head(critic["head"], h_NxTxE)


def critic_shardings(critic_kind: str, model_config, mesh, rules):
  replicated = sharding.replicated(mesh)
  shardings = {"head": {"w": replicated, "b": replicated}}
  if critic_kind == "separate":
    shardings["trunk"] = state_lib.param_shardings(model_config, mesh, rules)
  return shardings


def abstract_critic(critic_kind: str, model_config):
  from rl_post import models
  return jax.eval_shape(lambda p: init_critic(critic_kind, model_config, p),
                        models.abstract_params(model_config))


def with_critic_shardings(state_shardings, critic_kind: str, model_config, critic_optimizer,
                          mesh, rules):
  """`state_shardings` (a TrainState of shardings) extended by the critic and its moments."""
  critic_sh = critic_shardings(critic_kind, model_config, mesh, rules)
  abstract_opt = jax.eval_shape(critic_optimizer.init, abstract_critic(critic_kind, model_config))
  opt_sh = opt_state_shardings(critic_optimizer, abstract_opt, critic_sh,
                               sharding.replicated(mesh))
  return state_shardings.replace(critic=critic_sh, critic_opt_state=opt_sh)


def attach_critic(state, critic_kind: str, model_config, critic_optimizer, shardings):
  """`state` with a fresh critic (from its policy params: with LoRA, the frozen base,
  which the adapters equal at init) and critic optimizer state."""

  def init(params):
    critic = init_critic(critic_kind, model_config, params)
    return critic, critic_optimizer.init(critic)

  critic, opt_state = jax.jit(init, out_shardings=(shardings.critic,
                                                   shardings.critic_opt_state))(
      state.params if state.frozen is None else state_lib.base_params(state.frozen))
  return state.replace(critic=critic, critic_opt_state=opt_state)


def with_abstract_critic(abstract_state, shardings, critic_kind: str, model_config,
                         critic_optimizer):
  """A restore target: `abstract_state` plus the critic's ShapeDtypeStructs with shardings."""
  critic = abstract_critic(critic_kind, model_config)
  opt_state = jax.eval_shape(critic_optimizer.init, critic)
  place = lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
  return abstract_state.replace(
      critic=jax.tree.map(place, critic, shardings.critic),
      critic_opt_state=jax.tree.map(place, opt_state, shardings.critic_opt_state))
