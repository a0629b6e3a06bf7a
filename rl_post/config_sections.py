"""Typed, validated views of `ml_collections.ConfigDict` sections.

Experiment configs are Python files returning a ConfigDict; each library
component turns its section into a frozen dataclass with `from_section`, so
a typo or a bad value fails at start-up with a message naming the field.
"""

import dataclasses
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def from_section(cls: type[T], section: Mapping[str, Any] | None, name: str) -> T:
  """Builds dataclass `cls` from a config section, naming bad fields.

  Args:
    cls: a (frozen) dataclass whose __post_init__ validates values.
    section: the ConfigDict/dict for it (None means all defaults).
    name: the section's dotted path, used in error messages ("rl").
  Raises:
    ValueError: for unknown fields, missing required fields or bad values,
      with the message starting with "<name>.<field>".
  """
  values = dict(section or {})
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise ValueError(f"{name}: unknown field(s) {unknown}; known fields: {sorted(fields)}")
  missing = [f for f, spec in fields.items()
             if f not in values and spec.default is dataclasses.MISSING
             and spec.default_factory is dataclasses.MISSING]
  if missing:
    raise ValueError(f"{name}: missing required field(s) {missing}")
  for key, value in values.items():
    if hasattr(value, "to_dict"):
      values[key] = value.to_dict()
  try:
    return cls(**values)
  except ValueError as e:
    message = str(e)
    if not message.startswith(name + "."):
      message = f"{name}.{message}"
    raise ValueError(message) from None


def check(condition: bool, field: str, message: str, value: Any):
  """Raises ValueError "field message, got value" unless condition holds."""
  if not condition:
    raise ValueError(f"{field} {message}, got {value!r}")
