"""Arithmetic expressions from model text, parsed by our own code, never `eval`.

One left-to-right pass tokenizes, a recursive-descent parser evaluates while
it parses (so no tree deeper than the parenthesis nesting is ever built), and
every operation is checked against `Limits` before it runs: literal size,
nesting depth, exponent size and the bit length of every intermediate
result. Work is therefore linear in the text's length whatever it contains
(power towers, thousands of digits, deep nesting, `__import__`).

Symbolic mode (`Limits.names` non-empty) checks expressions a computer
algebra system will parse afterwards (reasoning-gym's integration scorers):
only allowed names and functions, and no constant power that could explode.

Grammar:
  expr  := term (("+" | "-") term)*
  term  := unary (("*" | "/") unary)*
  unary := ("+" | "-") unary | power
  power := atom (("^" | "**") unary)?          # right-associative
  atom  := NUMBER | NAME | FUNC "(" expr ")" | "(" expr ")"
"""

import dataclasses
from fractions import Fraction

_OPERATORS = {"+": "+", "-": "-", "*": "*", "/": "/", "^": "^", "(": "(", ")": ")",
              "×": "*", "÷": "/", "−": "-"}


class ExprError(ValueError):
  """The text is not an allowed expression, or evaluating it would exceed the limits."""


@dataclasses.dataclass(frozen=True)
class Limits:
  """Bounds on what an expression may contain and compute.

  Attributes:
    max_chars: longest accepted text.
    max_depth: deepest nesting of parentheses, unary signs and powers.
    max_exponent: largest |exponent| of a power (numerator and denominator
      for a symbolic base).
    max_bits: largest bit length of any numerator or denominator, literal or
      intermediate.
    allow_power: whether "^" / "**" are accepted at all.
    allow_decimal: whether literals like "1.5" are accepted.
    names: variable names accepted in symbolic mode (e.g. {"x", "C", "pi"}).
    functions: function names accepted in symbolic mode (e.g. {"sin"}).
  """
  max_chars: int = 256
  max_depth: int = 32
  max_exponent: int = 64
  max_bits: int = 1024
  allow_power: bool = True
  allow_decimal: bool = False
  names: frozenset[str] = frozenset()
  functions: frozenset[str] = frozenset()

  def __post_init__(self):
    for field in ("max_chars", "max_depth", "max_exponent", "max_bits"):
      if int(getattr(self, field)) < 1:
        raise ValueError(f"Limits.{field} must be >= 1, got {getattr(self, field)!r}")


class Symbolic:
  """The value of a subexpression that contains a name (symbolic mode only)."""

  def __repr__(self):
    return "SYMBOLIC"


SYMBOLIC = Symbolic()


@dataclasses.dataclass(frozen=True)
class Parsed:
  """value: the exact result (None when symbolic); numbers: the literals, in order."""
  value: Fraction | None
  numbers: tuple[Fraction, ...]


def tokenize(text: str, limits: Limits) -> list[tuple[str, object, int]]:
  """(kind, value, position) tokens; kinds: num, name, op. One pass over `text`."""
  if not isinstance(text, str):
    raise ExprError(f"expression must be a string, got {type(text).__name__}")
  if len(text) > limits.max_chars:
    raise ExprError(f"expression longer than {limits.max_chars} characters")
  tokens, i, n = [], 0, len(text)
  while i < n:
    ch = text[i]
    if ch.isspace():
      i += 1
    elif ch == "*" and text.startswith("**", i):
      tokens.append(("op", "^", i))
      i += 2
    elif ch in _OPERATORS:
      tokens.append(("op", _OPERATORS[ch], i))
      i += 1
    elif "0" <= ch <= "9" or ch == ".":
      j = i
      while j < n and ("0" <= text[j] <= "9" or text[j] == "."):
        j += 1
      tokens.append(("num", _literal(text[i:j], i, limits), i))
      i = j
    elif ch.isascii() and (ch.isalpha() or ch == "_"):
      j = i
      while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
        j += 1
      tokens.append(("name", text[i:j], i))
      i = j
    else:
      raise ExprError(f"character {ch!r} at {i} is not allowed")
  return tokens


def _literal(digits: str, pos: int, limits: Limits) -> Fraction:
  if digits.count(".") > 1 or digits in (".",) or digits.endswith("."):
    raise ExprError(f"malformed number {digits!r} at {pos}")
  if "." in digits and not limits.allow_decimal:
    raise ExprError(f"decimal number {digits!r} at {pos} is not allowed")
  # 1 digit < 3.33 bits; checked before conversion, which is quadratic in the digit count
  if (len(digits) - 1) * 3 > limits.max_bits:
    raise ExprError(f"number at {pos} is larger than {limits.max_bits} bits")
  return Fraction(digits)


def _check_size(value, limits: Limits):
  if value is SYMBOLIC:
    return value
  if max(value.numerator.bit_length(), value.denominator.bit_length()) > limits.max_bits:
    raise ExprError(f"intermediate result larger than {limits.max_bits} bits")
  return value


class _Parser:
  """Evaluates while parsing; see the module docstring for the grammar."""

  def __init__(self, text: str, limits: Limits):
    self.limits = limits
    self.tokens = tokenize(text, limits)
    self.i = 0
    self.depth = 0
    self.numbers: list[Fraction] = []

  def run(self) -> Parsed:
    if not self.tokens:
      raise ExprError("empty expression")
    value = self._expr()
    if self.i != len(self.tokens):
      _, tok, pos = self.tokens[self.i]
      raise ExprError(f"unexpected {tok!r} at {pos}")
    return Parsed(None if value is SYMBOLIC else value, tuple(self.numbers))

  def _peek_op(self):
    if self.i < len(self.tokens) and self.tokens[self.i][0] == "op":
      return self.tokens[self.i][1]
    return None

  def _enter(self):
    self.depth += 1
    if self.depth > self.limits.max_depth:
      raise ExprError(f"expression nested deeper than {self.limits.max_depth}")

  def _expr(self):
    value = self._term()
    while self._peek_op() in ("+", "-"):
      op = self.tokens[self.i][1]
      self.i += 1
      rhs = self._term()
      if value is SYMBOLIC or rhs is SYMBOLIC:
        value = SYMBOLIC
      else:
        value = _check_size(value + rhs if op == "+" else value - rhs, self.limits)
    return value

  def _term(self):
    value = self._unary()
    while self._peek_op() in ("*", "/"):
      _, op, pos = self.tokens[self.i]
      self.i += 1
      rhs = self._unary()
      if op == "/" and rhs is not SYMBOLIC and rhs == 0:
        raise ExprError(f"division by zero at {pos}")
      if value is SYMBOLIC or rhs is SYMBOLIC:
        value = SYMBOLIC
      else:
        value = _check_size(value * rhs if op == "*" else value / rhs, self.limits)
    return value

  def _unary(self):
    op = self._peek_op()
    if op in ("+", "-"):
      self.i += 1
      self._enter()
      value = self._unary()
      self.depth -= 1
      return value if (op == "+" or value is SYMBOLIC) else -value
    return self._power()

  def _power(self):
    base = self._atom()
    if self._peek_op() != "^":
      return base
    pos = self.tokens[self.i][2]
    if not self.limits.allow_power:
      raise ExprError(f"powers are not allowed (at {pos})")
    self.i += 1
    self._enter()
    exponent = self._unary()
    self.depth -= 1
    return _power(base, exponent, pos, self.limits)

  def _atom(self):
    if self.i >= len(self.tokens):
      raise ExprError("expression ends where a number was expected")
    kind, tok, pos = self.tokens[self.i]
    self.i += 1
    if kind == "num":
      self.numbers.append(tok)
      return tok
    if kind == "name":
      if tok in self.limits.functions and self._peek_op() == "(":
        return self._parenthesised()
      if tok in self.limits.names:
        return SYMBOLIC
      raise ExprError(f"name {tok!r} at {pos} is not allowed")
    if tok == "(":
      self.i -= 1
      return self._parenthesised()
    raise ExprError(f"unexpected {tok!r} at {pos}")

  def _parenthesised(self):
    self.i += 1  # the "("
    self._enter()
    value = self._expr()
    if self._peek_op() != ")":
      raise ExprError("unbalanced parentheses")
    self.i += 1
    self.depth -= 1
    return value


def _power(base, exponent, pos: int, limits: Limits):
  if exponent is SYMBOLIC:
    return SYMBOLIC  # only reachable in symbolic mode; the CAS keeps it unevaluated
  if base is SYMBOLIC:
    if max(abs(exponent.numerator), exponent.denominator) > limits.max_exponent:
      raise ExprError(f"exponent at {pos} exceeds {limits.max_exponent}")
    return SYMBOLIC
  if exponent.denominator != 1:
    raise ExprError(f"non-integer exponent at {pos}")
  if abs(exponent) > limits.max_exponent:
    raise ExprError(f"exponent at {pos} exceeds {limits.max_exponent}")
  if base == 0 and exponent < 0:
    raise ExprError(f"zero to a negative power at {pos}")
  bits = max(base.numerator.bit_length(), base.denominator.bit_length())
  if bits * abs(int(exponent)) > limits.max_bits + abs(int(exponent)):
    raise ExprError(f"power at {pos} larger than {limits.max_bits} bits")
  return _check_size(base ** int(exponent), limits)


def parse(text: str, limits: Limits = Limits()) -> Parsed:
  """Parses and evaluates `text`; raises ExprError on anything not allowed."""
  try:
    return _Parser(text, limits).run()
  except RecursionError:  # only with a max_depth set beyond the interpreter's limit
    raise ExprError("expression nested too deeply") from None


def evaluate(text: str, limits: Limits = Limits()) -> Fraction:
  """The exact value of a numeric expression; raises ExprError otherwise."""
  parsed = parse(text, limits)
  if parsed.value is None:
    raise ExprError("expression is symbolic, not a number")
  return parsed.value


def format_number(value: Fraction) -> str:
  return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
