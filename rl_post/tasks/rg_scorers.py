"""Safe paths and fixes for reasoning-gym (0.1.25) scorers.

Some of its scorers evaluate model text with Python's `eval` or with
sympy's `parse_expr` (which also calls `eval`), so an answer such as
`__import__('os').system(...)` would run in the trainer's reward worker.
Those modules get their global names `eval` / `parse_expr` / `sympy`
rebound to checked versions:

* `eval` -> `ast.literal_eval` on bounded text (lists, numbers, strings only);
* numeric `parse_expr` (puzzle24, countdown) -> `safe_expr.evaluate`,
  + - * / and parentheses only, integer results only (sympy's int()
  truncation let 49/2 count as 24);
* symbolic `parse_expr` (integration, polynomial multiplication) -> the text
  is first checked by `safe_expr` in symbolic mode (whitelisted names and
  functions, bounded constant powers), then handed to sympy.

One scorer accepts any non-empty answer: game_of_life_halting compares
`bool(answer) == bool(entry["answer"])`, and every non-empty string is
truthy. It is replaced by an exact, case-insensitive True/False match.
"""

import ast
import sys

from rl_post.tasks import safe_expr

EVAL_MODULES = ("string_insertion", "spiral_matrix", "binary_matrix", "n_queens")
NUMERIC_PARSE_MODULES = ("puzzle24", "countdown")
SYMPY_MODULES = {"simple_integration": "sympy", "intermediate_integration": "sympy",
                 "polynomial_multiplication": "sp"}
# Answers reach these only through the adapter, which refuses answers much
# longer than the reference; this bound only stops direct misuse.
MAX_TEXT_CHARS = 1_000_000

_NUMERIC = safe_expr.Limits(max_chars=1024, max_depth=64, allow_power=False)
_SYMBOLIC = safe_expr.Limits(
    max_chars=MAX_TEXT_CHARS, max_depth=64, max_exponent=256, allow_decimal=True,
    names=frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") | {"pi"},
    functions=frozenset({"sin", "cos", "tan", "exp", "log", "sqrt", "asin", "acos", "atan",
                         "sinh", "cosh", "tanh"}))


class UnsafeText(ValueError):
  """Model text refused before it reached eval or sympy."""


def literal_eval(text, *args, **kwargs):
  """Stands in for `eval` in scorer modules: Python literals only."""
  if args or kwargs or not isinstance(text, str):
    raise UnsafeText("eval with namespaces or non-string input is not allowed")
  if len(text) > MAX_TEXT_CHARS:
    raise UnsafeText(f"text longer than {MAX_TEXT_CHARS} characters")
  try:
    return ast.literal_eval(text.strip())
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
    raise UnsafeText(f"not a Python literal: {type(e).__name__}") from None


def numeric_parse_expr(text, *args, **kwargs):
  """Stands in for sympy's `parse_expr` where a number is expected."""
  del args, kwargs
  try:
    value = safe_expr.evaluate(text, _NUMERIC)
  except safe_expr.ExprError as e:
    raise UnsafeText(str(e)) from None
  if value.denominator != 1:
    raise UnsafeText(f"{text!r} is not a whole number")
  return int(value)


class CheckedSympy:
  """The sympy module, except that `parse_expr` checks its text first."""

  def __init__(self, module):
    self._module = module

  def __getattr__(self, attr):
    return getattr(self._module, attr)

  def parse_expr(self, text, *args, **kwargs):
    try:
      safe_expr.parse(text, _SYMBOLIC)
    except safe_expr.ExprError as e:
      raise UnsafeText(str(e)) from None
    return self._module.parse_expr(text, *args, **kwargs)


def accepts_reference(generator: str, reference: str) -> bool:
  """Whether the checked scorer can judge this reference; intermediate_integration
  sometimes answers with an unevaluated Integral(...), which the check refuses."""
  if generator not in SYMPY_MODULES:
    return True
  try:
    safe_expr.parse(reference, _SYMBOLIC)
  except safe_expr.ExprError:
    return False
  return True


def game_of_life_halting_score(answer, entry) -> float:
  """Exact True/False match (the original accepts any non-empty string)."""
  if not isinstance(answer, str):
    return 0.0
  return float(answer.strip().casefold() == str(entry["answer"]).strip().casefold())


FIXED_SCORERS = {"game_of_life_halting": game_of_life_halting_score}

_installed = False


def install():
  """Rebinds the unsafe names in the affected reasoning-gym modules (idempotent)."""
  global _installed
  if _installed:
    return
  from reasoning_gym.factory import DATASETS
  for name in EVAL_MODULES:
    sys.modules[DATASETS[name][0].__module__].eval = literal_eval
  for name in NUMERIC_PARSE_MODULES:
    sys.modules[DATASETS[name][0].__module__].parse_expr = numeric_parse_expr
  for name, attr in SYMPY_MODULES.items():
    module = sys.modules[DATASETS[name][0].__module__]
    current = getattr(module, attr)
    if not isinstance(current, CheckedSympy):
      setattr(module, attr, CheckedSympy(current))
  _installed = True
