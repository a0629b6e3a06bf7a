"""The algorithm registry: `rl.algorithm = "<name>"` picks an entry.

Each entry (`rl_post.rl.algorithm.Algorithm`) brings its frozen config
dataclass, its advantage estimator and its loss. The `rl` config section
holds one sub-section per entry (`rl.grpo`, `rl.ppo`, ...) with that
dataclass's defaults, built by `section_defaults`; adding an algorithm is
one `register` call and touches no trainer code.

`rl.algorithm` may also be an import path, like a task domain's:
"package.module:ATTR", where ATTR is an `Algorithm` or a callable that
returns one. `get` imports it on first use and registers it under its
`name`, so its sub-section is `rl.<name>` (its defaults where the config
has none; `rl_post.rl.config.add_algorithm` puts them in a config file).
"""

import dataclasses

from rl_post.envs import specs
from rl_post.errors import one_line
from rl_post.rl.algorithm import Algorithm
from rl_post.rl.algorithms import grpo, ppo, reinforce_pp, rloo

_REGISTRY: dict[str, Algorithm] = {}
_IMPORTED: dict[str, Algorithm] = {}  # "module:ATTR" -> the entry it registered


def register(algorithm: Algorithm) -> Algorithm:
  """Adds `algorithm` under its name; names are unique."""
  if algorithm.name in _REGISTRY:
    raise ValueError(f"algorithm {algorithm.name!r} is already registered")
  if not dataclasses.is_dataclass(algorithm.config_cls):
    raise TypeError(f"{algorithm.name}: config_cls must be a dataclass")
  _REGISTRY[algorithm.name] = algorithm
  return algorithm


def get(name: str) -> Algorithm:
  """The entry `name`: a registered name or "package.module:ATTR" (imported and
  registered on first use).

  Raises:
    ValueError: one line starting "rl.algorithm" for an unknown name, a path
      that does not import, or an ATTR that gives no Algorithm.
  """
  if isinstance(name, str) and ":" in name:
    return _import(name)
  if name not in _REGISTRY:
    raise ValueError(f"rl.algorithm must be one of {names()} or 'package.module:ATTR', "
                     f"got {name!r}")
  return _REGISTRY[name]


def _import(spec: str) -> Algorithm:
  if spec in _IMPORTED:
    return _IMPORTED[spec]
  try:
    target = specs.import_class(spec, "algorithm")
  except ValueError as e:
    raise ValueError(f"rl.algorithm: {e}") from None
  algorithm = target
  if not isinstance(target, Algorithm) and callable(target):
    try:
      algorithm = target()
    except Exception as e:  # a user's factory: its error, on one line
      message = f"rl.algorithm: {spec!r} raised {type(e).__name__}: {e}"
      raise ValueError(one_line(message)) from None
  if not isinstance(algorithm, Algorithm):
    raise ValueError(f"rl.algorithm: {spec!r} is a {type(algorithm).__name__}, not an Algorithm "
                     "or a callable returning one")
  if _REGISTRY.get(algorithm.name) not in (None, algorithm):
    raise ValueError(f"rl.algorithm: {spec!r} is named {algorithm.name!r}, the name of "
                     "another registered algorithm")
  if algorithm.name not in _REGISTRY:
    try:
      register(algorithm)
    except TypeError as e:
      raise ValueError(f"rl.algorithm: {spec!r}: {e}") from None
  _IMPORTED[spec] = algorithm
  return algorithm


def names() -> tuple[str, ...]:
  return tuple(_REGISTRY)


def algorithm_defaults() -> dict:
  """{name: {field: default}} for every registered algorithm."""
  return {name: dataclasses.asdict(alg.config_cls()) for name, alg in _REGISTRY.items()}


for _alg in (grpo.GRPO, grpo.DR_GRPO, grpo.DAPO, grpo.GSPO, rloo.RLOO,
             reinforce_pp.REINFORCE_PP, ppo.PPO):
  register(_alg)
