"""Name -> Domain construction; the one place domains are looked up."""

from typing import Any, Callable, Mapping

from rl_post.tasks.arithmetic import Arithmetic
from rl_post.tasks.base import Domain

_FACTORIES: dict[str, Callable[..., Domain]] = {"arithmetic": Arithmetic}


def register(name: str, factory: Callable[..., Domain]):
  """Adds a domain family; later domains call this at import time."""
  if name in _FACTORIES:
    raise ValueError(f"domain {name!r} is already registered")
  _FACTORIES[name] = factory


def make_domain(name: str, options: Mapping[str, Any] | None = None) -> Domain:
  if name not in _FACTORIES:
    raise ValueError(f"unknown domain {name!r}; registered: {sorted(_FACTORIES)}")
  return _FACTORIES[name](**dict(options or {}))


def available() -> list[str]:
  return sorted(_FACTORIES)
