"""Where the RL trainer's rollouts come from: the `RolloutSource` seam.

  c.rl.rollout_source = ""              # single-turn, or episodes when episodes.enabled
  c.rl.rollout_source = "episodes"      # a built-in by name: "single_turn" | "episodes"
  c.rl.rollout_source = "my_project.replay:ReplaySource"   # any subclass, by "module:Class"

One round, as data (N = B tasks x G rollouts, group-major):
  source.launch(params, ref_params, it=, rnd=, key=, timer=)  -> Round
      tasks_N, host rollout [N, T] (tokens, masks, behaviour log-probs),
      pending rewards (`.result()` -> RewardBatch), reference log-probs
      (dispatched, or None), the tokens on the device
  trainer: critic values, rewards awaited, dynamic filtering, the update
  source.observe(scored)                 -> the step's metrics (a curriculum sees its rounds)
  source.evaluate(params, step=, key=)   -> held-out metrics ({} when there are none)
  source.state_dict()  -> {...}          saved with every checkpoint (JSON host state)
  source.load_state_dict(state)          after a restore ({} from a checkpoint without it)

The trainer builds one source at start-up (`source_class(...)(components, config)`),
calls `start()` once its checkpoint is restored, `close()` when it ends, and
never asks which kind it holds. A round's tasks and rollouts must be a function
of (seed, `it`, `rnd`) and the source's restored state, and `key` is the only
randomness a round may draw on, so that a resumed run repeats exactly what an
uninterrupted one would have done. A source with state of its own (a
curriculum, a replay buffer, counters) returns it from `state_dict`: the
trainer stores it as the "source" entry of each checkpoint's extra JSON item
(`checkpoints/<step>/extra/metadata`, beside the task mixture's curriculum state) and
hands it back to `load_state_dict` after it restores that checkpoint (or
rolls back to it); a fresh start or a rollback past every checkpoint gets
the state the source had when it was built. The state changes in `observe`
only, never in `launch`: step t's checkpoint is written after step t + 1's
rounds were launched (metrics one step late, async rewards), and a rollback
drops rounds already launched. The built-ins are loaded like any other
source: single-turn generation over the task mixture
(`rl_post.rl.single_turn_source`) and multi-turn episodes with tools
(`rl_post.rl.episode_source`, over `rl_post.envs`).
"""

import importlib
from typing import Any, NotRequired, Optional, TypedDict

from rl_post.envs import section as episodes_section
from rl_post.errors import ConfigError

BUILTIN = {"single_turn": "rl_post.rl.single_turn_source:SingleTurnSource",
           "episodes": "rl_post.rl.episode_source:EpisodeSource"}


class Round(TypedDict):
  """One launched round of B tasks x G rollouts.

  tasks_N: the task of each row (each task's G rows next to each other).
  host: the rollout on the host, with tokens_BxT, mask_BxT (response
    positions), loss_mask_BxT, logp_BxT (behaviour log-probs, 0 off the loss
    mask), prompt_lens_B, response_lens_B and finished_B.
  pending: the rewards being scored; `.result()` -> `RewardBatch` of N rows.
  ref_logp: reference log-probs [N, T] on the device (dispatched), or None
    when the run has no reference (`ref_params` None).
  tokens: tokens_BxT on the device, the critic's input.
  trainer_logp: (optional) the trainer's f32 log-probs [N, T] of the sampled
    tokens when the sampler ran another precision or an off-policy correction
    is on (`rl.recomputes_logp`), else None or absent.
  """
  tasks_N: list
  host: Any
  pending: Any
  ref_logp: Any
  tokens: Any
  trainer_logp: NotRequired[Any]


class RolloutSource:
  """Rounds of rollouts for the RL trainer (the module docstring has the contract).

  A source is built as `Source(components, config)`: the run's
  `rl_post.rl.components.RLComponents` (every library section already parsed:
  `rl`, `tasks`, `rewards`, `episodes`, `run` with the seed; the run context
  with its tokenizer and mesh, `model_config`, `sampling`, the task
  `mixture`, `shard` / `build_rows` for global batches, `ref_fn_for`) and the
  raw config, for a section of the source's own (the library's sections are
  read from `components`, parsed once). A bad setting should raise there,
  before the run writes files.

  Attributes:
    shapes: the update shapes its rounds can reach (`rl.shape_buckets.plan`),
      logged at start-up; None when the source does not bound them.
    runs_on_sampler_mesh: True when `launch` generates on `components.sampler_mesh`
      (`rl_post.rl.sampler_mesh`: `place` the params, generate inside `running()`,
      return the device arrays of a `Round` through `back`); a run with
      `rl.sampler_devices` > 0 refuses a source without it.
  """
  shapes = None
  runs_on_sampler_mesh = False

  @classmethod
  def tokenizer_for(cls, components, config) -> Optional[Any]:
    """The tokenizer the run must use instead of `tokenizer.path` (None: that one).
    Called before the run context exists: `components` has its parsed sections only."""
    del components, config
    return None

  def start(self) -> None:
    """Starts what the rounds need (worker processes), after the checkpoint restore."""

  def launch(self, params, ref_params, *, it: int, rnd: int, key, timer) -> Round:
    """Round `rnd` of iteration `it` (0: the step's batch; more: dynamic filtering's
    refills), generated with `params` and `key`; rewards and reference
    log-probs (with `ref_params`, when not None) dispatched, not awaited.
    `timer("rollout")` / `timer("reward")` time its phases."""
    raise NotImplementedError

  def observe(self, scored: dict) -> dict:
    """The step's metrics from every scored row of its rounds (`scored`: the
    round's tasks_N, host, rewards, ref_logp, values); a curriculum updates here."""
    del scored
    return {}

  def evaluate(self, params, *, step: int, key) -> dict:
    """Held-out metrics of the policy `params` after `step` ({}: none)."""
    del params, step, key
    return {}

  def close(self) -> None:
    """Stops what `start` or the rounds started."""

  def state_dict(self) -> dict:
    """The source's own host state, saved with every checkpoint: a JSON-serialisable
    dict (JSON turns tuples into lists and keys into strings). {}: none."""
    return {}

  def load_state_dict(self, state: dict) -> None:
    """Restores what `state_dict` returned, after the trainer restores a checkpoint
    (or rolls back to one); {} from a checkpoint saved without it."""
    del state


def import_source(spec: str) -> type:
  """The `RolloutSource` subclass named "package.module:Class".

  Raises:
    ConfigError: naming `rl.rollout_source` when it does not load or is not one.
  """
  module_name, _, attr = spec.partition(":")
  try:
    cls = getattr(importlib.import_module(module_name), attr)
  except (ImportError, AttributeError, ValueError) as e:
    raise ConfigError("rl.rollout_source", spec, f"does not load: {e}") from None
  if not (isinstance(cls, type) and issubclass(cls, RolloutSource)):
    raise ConfigError("rl.rollout_source", spec, "is not a RolloutSource subclass "
                      "(rl_post.rl.rollout_source)")
  return cls


def sections(config) -> dict:
  """The sections the built-in sources read, parsed once for the run (`RLComponents`
  holds each as an attribute): "episodes", the `EpisodesConfig` (None when the section
  is absent or disabled)."""
  return {"episodes": episodes_section.load(config.get("episodes"))}


def source_class(name: str, episodes) -> type:
  """The source class a run uses: `name` (`rl.rollout_source`, a built-in or
  "module:Class"), or for "" the episodes source when the run's parsed
  `episodes` section (`rl_post.envs.section.load`: an `EpisodesConfig`, None
  when absent or disabled) is enabled, else single-turn.

  Raises:
    ConfigError: an unknown name, a spec that does not load, or "single_turn"
      beside an enabled `episodes` section.
  """
  if not name:
    return import_source(BUILTIN["episodes" if episodes is not None else "single_turn"])
  if name == "single_turn" and episodes is not None:
    raise ConfigError("rl.rollout_source", name, "leaves the enabled episodes section unused: "
                      "set episodes.enabled=False, or rl.rollout_source to \"\" or \"episodes\"")
  if ":" not in name and name not in BUILTIN:
    raise ConfigError("rl.rollout_source", name, f"must be one of {sorted(BUILTIN)}, "
                      "\"module:Class\" of a RolloutSource subclass, or \"\" (episodes "
                      "when episodes.enabled, else single_turn)")
  return import_source(BUILTIN.get(name, name))
