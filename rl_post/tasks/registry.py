"""Name -> Domain construction; the one place domains are looked up.

A name is either a registered one ("arithmetic") or an import path
"package.module:ClassName" of a Domain subclass, so user-defined domains
also load inside the reward worker processes without registration code.
"""

import functools
import importlib
from typing import Any, Callable, Mapping

from rl_post.tasks import reasoning_gym
from rl_post.tasks.arithmetic import Arithmetic
from rl_post.tasks.base import Domain
from rl_post.tasks.code import Code  # sandbox-executed domains
from rl_post.tasks.countdown import Countdown
from rl_post.tasks.extraction import Extraction
from rl_post.tasks.humaneval import HumanEval
from rl_post.tasks.math import Math
from rl_post.tasks.retrieval import Retrieval
from rl_post.tasks.shell import Shell
from rl_post.tasks.sql import Sql

_FACTORIES: dict[str, Callable[..., Domain]] = {"arithmetic": Arithmetic}
_FACTORIES.update({d.name: d for d in (Code, HumanEval, Shell, Sql)})  # sandbox-executed domains
_FACTORIES["countdown"] = Countdown
_FACTORIES["math"] = Math
_FACTORIES["extraction"] = Extraction
_FACTORIES["retrieval"] = Retrieval
_FACTORIES.update({name: functools.partial(reasoning_gym.ReasoningGymDomain, name[len("rg/"):])
                   for name in reasoning_gym.domain_names()})


def register(name: str, factory: Callable[..., Domain]):
  """Adds a domain family; later domains call this at import time."""
  if name in _FACTORIES:
    raise ValueError(f"domain {name!r} is already registered")
  _FACTORIES[name] = factory


def _import_factory(path: str) -> Callable[..., Domain]:
  module_name, _, attr = path.partition(":")
  try:
    factory = getattr(importlib.import_module(module_name), attr)
  except (ImportError, AttributeError) as e:
    raise ValueError(f"cannot import domain {path!r}: {e}") from None
  if not (isinstance(factory, type) and issubclass(factory, Domain)):
    raise ValueError(f"domain {path!r} is not a Domain subclass")
  return factory


def is_known(name: str) -> bool:
  return name in _FACTORIES or ":" in name


def make_domain(name: str, options: Mapping[str, Any] | None = None) -> Domain:
  """The domain `name` built with `options`.

  `options["answer_format"]`, if given, is not a constructor argument: it
  selects how the domain asks for and reads answers (`Domain.set_answer_format`).
  """
  options = dict(options or {})
  answer_format = options.pop("answer_format", None)
  if ":" in name:
    factory = _import_factory(name)
  elif name in _FACTORIES:
    factory = _FACTORIES[name]
  else:
    raise ValueError(f"unknown domain {name!r}; registered: {sorted(_FACTORIES)} "
                     "(or use 'module:Class')")
  domain = factory(**options)
  if domain.name != name and ":" not in name:
    raise ValueError(f"domain factory {name!r} built a domain named {domain.name!r}")
  if answer_format is not None:
    domain.set_answer_format(answer_format)
  return domain


def available() -> list[str]:
  return sorted(_FACTORIES)
