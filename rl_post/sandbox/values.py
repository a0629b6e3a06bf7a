"""Tagged plain values from a grading run, decoded and compared on the host.

The driver in the sandbox encodes results as JSON with one-key tags for the
non-JSON types ({"B": hex} bytes, {"L"|"T"|"S"|"F": [...]} list, tuple,
set, frozenset, {"D": [[k, v], ...]} dict). Decoding rebuilds exact plain
types, so no object of the candidate's ever reaches a comparison here.
"""

import math

MAX_DEPTH = 64


class DecodeError(Exception):
  pass


def decode(v, depth=0):
  if depth > MAX_DEPTH:
    raise DecodeError("nested too deeply")
  if v is None or type(v) in (bool, int, float, str):
    return v
  if type(v) is not dict or len(v) != 1:
    raise DecodeError(f"not a tagged value: {type(v).__name__}")
  (tag, body), = v.items()
  if tag == "B" and type(body) is str:
    return bytes.fromhex(body)
  if type(body) is not list:
    raise DecodeError(f"bad body for tag {tag!r}")
  if tag == "L":
    return [decode(x, depth + 1) for x in body]
  if tag == "T":
    return tuple(decode(x, depth + 1) for x in body)
  if tag in ("S", "F"):
    items = [decode(x, depth + 1) for x in body]
    try:
      return set(items) if tag == "S" else frozenset(items)
    except TypeError:
      raise DecodeError("unhashable set element") from None
  if tag == "D":
    out = {}
    for pair in body:
      if type(pair) is not list or len(pair) != 2:
        raise DecodeError("bad dict item")
      try:
        out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
      except TypeError:
        raise DecodeError("unhashable dict key") from None
    return out
  raise DecodeError(f"unknown tag {tag!r}")


def close_enough(actual, expected, tol):
  if isinstance(expected, float) or isinstance(actual, float):
    if type(actual) not in (int, float) or type(expected) not in (int, float):
      return False
    return math.isclose(actual, expected, rel_tol=0.0, abs_tol=tol)
  if type(actual) in (list, tuple) and type(actual) is type(expected):
    return len(actual) == len(expected) and all(
        close_enough(a, e, tol) for a, e in zip(actual, expected))
  return actual == expected


def typed_equal(actual, expected, tol):
  """== on decoded plain values, with the types checked at every level."""
  numeric = (int, float)
  if type(actual) in numeric and type(expected) in numeric:
    if type(actual) is int and type(expected) is int:
      return actual == expected
    return math.isclose(actual, expected, rel_tol=tol, abs_tol=tol)
  if type(actual) is not type(expected):
    return False
  if type(actual) in (list, tuple):
    return len(actual) == len(expected) and all(
        typed_equal(a, e, tol) for a, e in zip(actual, expected))
  if type(actual) is dict:
    return actual.keys() == expected.keys() and all(
        typed_equal(actual[k], expected[k], tol) for k in expected)
  return actual == expected


def decode_value(v):
  """A tagged plain value (the driver's encoding) as a Python value.

  Raises:
    ValueError: not a well-formed tagged value.
  """
  try:
    return decode(v)
  except (DecodeError, RecursionError) as e:
    raise ValueError(f"bad tagged value: {e}") from None
