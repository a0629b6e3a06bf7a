"""The algorithm registry: `rl.algorithm = "<name>"` picks an entry.

Each entry (`rl_post.rl.algorithm.Algorithm`) brings its frozen config
dataclass, its advantage estimator and its loss. The `rl` config section
holds one sub-section per entry (`rl.grpo`, `rl.ppo`, ...) with that
dataclass's defaults, built by `section_defaults`; adding an algorithm is
one `register` call and touches no trainer code.
"""

import dataclasses

from rl_post.rl.algorithm import Algorithm
from rl_post.rl.algorithms import grpo, ppo, reinforce_pp, rloo

_REGISTRY: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
  """Adds `algorithm` under its name; names are unique."""
  if algorithm.name in _REGISTRY:
    raise ValueError(f"algorithm {algorithm.name!r} is already registered")
  if not dataclasses.is_dataclass(algorithm.config_cls):
    raise TypeError(f"{algorithm.name}: config_cls must be a dataclass")
  _REGISTRY[algorithm.name] = algorithm
  return algorithm


def get(name: str) -> Algorithm:
  if name not in _REGISTRY:
    raise ValueError(f"rl.algorithm must be one of {names()}, got {name!r}")
  return _REGISTRY[name]


def names() -> tuple[str, ...]:
  return tuple(_REGISTRY)


def algorithm_defaults() -> dict:
  """{name: {field: default}} for every registered algorithm."""
  return {name: dataclasses.asdict(alg.config_cls()) for name, alg in _REGISTRY.items()}


for _alg in (grpo.GRPO, grpo.DR_GRPO, grpo.DAPO, grpo.GSPO, rloo.RLOO,
             reinforce_pp.REINFORCE_PP, ppo.PPO):
  register(_alg)
