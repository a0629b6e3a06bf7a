"""Loading "package.module:ClassName" specs: tools and env domains named in a config."""

import importlib


def import_class(spec: str, what: str):
  """The attribute `ClassName` of module `package.module`.

  Raises:
    ValueError: "cannot import <what> <spec>: ..." when the module or the
      attribute is missing (`what` names the kind: "tool", "env domain").
  """
  module_name, _, attr = spec.partition(":")
  try:
    return getattr(importlib.import_module(module_name), attr)
  except (ImportError, AttributeError, ValueError) as e:
    raise ValueError(f"cannot import {what} {spec!r}: {e}") from None
