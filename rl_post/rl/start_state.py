"""Where an RL run starts: its initial TrainState, the frozen reference copy, and the
newest good checkpoint of its workdir (used by `rl_post.rl.trainer`).

  state = fresh_state(c)          params from rl.init_from (an SFT export), config.pretrained,
                                  or a fresh init; plus the algorithm's critic
  ref = reference_copy(c, state)  the starting policy in rl.ref_dtype, or None
  initial = host_state(c)         the host-side state at the start
  state, it = restore_latest(c, checkpoints, initial, workdir)

A checkpoint holds the TrainState and, in its extra JSON item
(`checkpoints/<step>/extra/metadata`), the iteration count, the tokenizer's
fingerprint and the host-side state (`host_state`): the mixture's curriculum
state ("mixture") and the rollout source's own ("source",
`RolloutSource.state_dict`). A workdir whose newest checkpoints are all
corrupt starts again from the initial state.
"""

import json
import os

import jax
from absl import logging

from rl_post import errors
from rl_post.checkpoint.manager import CheckpointMismatchError, CorruptCheckpointError
from rl_post.checkpoint.params import load_model_config, load_params
from rl_post.data import tokenizer_fingerprint
from rl_post.errors import ConfigError, MissingInputError
from rl_post.rl import critic as critic_lib
from rl_post.rl.components import RLComponents
from rl_post.rl.config import RLConfig
from rl_post.training import state as state_lib
from rl_post.training.run import (RunContext, mismatched_checkpoints, pretrained_params,
                                  shape_differences)


def initial_params(ctx: RunContext, rl: RLConfig):
  """Params to start from: exported SFT params, `config.pretrained`, or None (fresh init).

  From `config.pretrained` with `rl.lora.base_quant` set: the quantized frozen
  base, made as the checkpoint is read (`pretrained_params`)."""
  if not rl.init_from:
    return pretrained_params(ctx, rl.lora, "rl.lora")
  if not os.path.isdir(rl.init_from):
    raise MissingInputError("rl.init_from", rl.init_from,
                            "is not a directory; point it at the export/ folder of a finished "
                            "SFT run")
  try:
    stored = load_model_config(rl.init_from)
  except errors.UserError:
    raise
  except FileNotFoundError as e:
    raise MissingInputError("rl.init_from", rl.init_from, str(e)) from None
  except (ValueError, TypeError) as e:  # a garbled or foreign model_config.json
    raise MissingInputError("rl.init_from", rl.init_from,
                            f"has an unreadable model_config.json ({e})") from None
  diff = shape_differences(stored, ctx.model_config)
  if diff:
    raise ConfigError("rl.init_from", rl.init_from, f"holds a model that differs from "
                      f"config.model in {diff} (stored, configured)")
  tokenizer_fingerprint.check(tokenizer_fingerprint.read(rl.init_from), ctx.tokenizer,
                              "rl.init_from", rl.init_from, ctx.sections.tokenizer_path)
  with errors.reading("rl.init_from", rl.init_from):
    return load_params(rl.init_from,
                       state_lib.abstract_sharded_params(ctx.model_config, ctx.mesh, ctx.rules))


def fresh_state(c: RLComponents):
  """The initial TrainState: `initial_params`, with the algorithm's critic if it has one."""
  ctx, rl = c.ctx, c.rl
  state = state_lib.create_train_state(ctx.model_config, c.optimizer, ctx.mesh, ctx.rules,
                                       ctx.key("init"), params=initial_params(ctx, rl),
                                       lora=rl.lora, donate=True)  # loaded here: held once
  if c.critic_optimizer is None:
    return state
  return critic_lib.attach_critic(state, rl.algo.critic, ctx.model_config, c.critic_optimizer,
                                  c.state_shardings)


def reference_copy(c: RLComponents, state):
  """A frozen copy of the starting policy, optionally in bf16, or None: with LoRA the
  base itself serves unless it must be cast (`c.reference_params`)."""
  rl = c.rl
  if not rl.needs_reference or (state.frozen is not None
                                and c.ctx.model_config.param_dtype == rl.ref_dtype):
    return None
  return jax.jit(lambda p: jax.tree.map(lambda x: x.astype(rl.ref_dtype), p))(
      state.params if state.frozen is None else state_lib.base_params(state.frozen))


def host_state(c: RLComponents) -> dict:
  """The host-side state saved with every checkpoint: {"mixture": the task
  mixture's curriculum state, "source": the rollout source's `state_dict()`}.

  Raises:
    TypeError: the source's state is not a JSON-serialisable dict.
  """
  source = c.source.state_dict()
  try:
    json.dumps(source, allow_nan=False)
    ok = isinstance(source, dict)
  except (TypeError, ValueError):
    ok = False
  if not ok:
    raise TypeError(f"{type(c.source).__name__}.state_dict() must return a JSON-serialisable "
                    f"dict (rl_post.rl.rollout_source), got {type(source).__name__}")
  return {"mixture": c.mixture.state_dict(), "source": source}


def _load_source_state(c: RLComponents, extra: dict, path: str, workdir: str):
  """Hands the checkpoint's "source" entry (at `path`; {} when it has none: saved
  before sources had state) to the rollout source.

  Raises:
    MissingInputError: naming `path` when the entry is not a JSON object or the
      source refuses it.
  """
  state = extra.get("source", {})
  if not isinstance(state, dict):
    raise MissingInputError("--workdir", workdir, f"has a checkpoint whose rollout source "
                            f"state ({path}, entry \"source\") is not a JSON object: "
                            f"{type(state).__name__}")
  try:
    c.source.load_state_dict(state)
  except (KeyError, TypeError, ValueError) as e:
    raise MissingInputError("--workdir", workdir, f"has a checkpoint whose rollout source "
                            f"state ({path}, entry \"source\") "
                            f"{type(c.source).__name__} cannot load: "
                            f"{errors.one_line(e)}") from None


def _start_over(c: RLComponents, initial: dict):
  """The initial state, with the host-side state the run started with."""
  c.mixture.load_state_dict(initial["mixture"])
  c.source.load_state_dict(initial["source"])
  return fresh_state(c), 0


def restore_latest(c: RLComponents, checkpoints, initial: dict, workdir: str):
  """(state, iteration) of the newest good checkpoint, or the initial state; the
  host-side state (`host_state`: the mixture's curriculum, the rollout source's
  own) restored with it, `initial` with the initial state."""
  ctx = c.ctx
  if checkpoints.latest_step() is None:
    return _start_over(c, initial)
  try:
    restored, extra = checkpoints.restore(c.abstract_state(), fallback=True)
  except CorruptCheckpointError as e:  # all moved aside to checkpoints/corrupt/
    logging.warning("%s\nstarting again from the initial state", e)
    return _start_over(c, initial)
  except CheckpointMismatchError as e:
    raise mismatched_checkpoints(workdir, ctx.config, e, checkpoints.read_extra(),
                                 ctx.tokenizer) from None
  tokenizer_fingerprint.check(extra.get("tokenizer"), ctx.tokenizer, "--workdir", workdir,
                              ctx.sections.tokenizer_path)
  if "rl_step" not in extra:  # an SFT run's state has the same tree as GRPO's
    raise ConfigError("--workdir", workdir, "holds another kind of run's checkpoints (an "
                      "SFT run's?); start RL from its export with rl.init_from=<that "
                      "workdir>/export and a --workdir of its own")
  if "mixture" in extra:
    c.mixture.load_state_dict(extra["mixture"])
  else:
    c.mixture.load_state_dict(initial["mixture"])
    if c.tasks.curriculum.enabled:
      logging.warning("checkpoint has no mixture state: the curriculum restarts")
  step = int(extra["rl_step"])
  _load_source_state(c, extra, checkpoints.extra_path(step), workdir)
  return restored, step
