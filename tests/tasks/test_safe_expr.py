"""safe_expr: exact values, hostile inputs rejected promptly, never eval."""

import re
from fractions import Fraction

import pytest

from rl_post.tasks import safe_expr
from rl_post.tasks.safe_expr import ExprError, Limits, evaluate, parse


@pytest.mark.parametrize("text,value", [
    ("1+2*3", 7), ("(1+2)*3", 9), ("7/2", Fraction(7, 2)), ("-3--3", 0), ("2^10", 1024),
    ("2**3**2", 512), ("-2^2", -4), ("(2)^-2", Fraction(1, 4)), ("8 ÷ 2 × 3", 12),
    ("100 − 1", 99), (" ( ( 4 ) ) ", 4),
])
def test_values(text, value):
  assert evaluate(text) == value


def test_numbers_are_collected_in_order():
  assert parse("(25-5)*(3+1)/2").numbers == (25, 5, 3, 1, 2)


@pytest.mark.parametrize("text,message", [
    ("", "empty"), ("1+", "ends where a number"), ("(1+2", "unbalanced"), ("1+2)", "unexpected"),
    ("1/0", "division by zero"), ("1/(2-2)", "division by zero"), ("0^-1", "zero to a negative"),
    ("1.5+1", "decimal"), ("1..2", "malformed"), ("2^(1/2)", "non-integer exponent"),
    ("__import__('os').system('true')", "not allowed"), ("x+1", "not allowed"),
    ("eval('1')", "not allowed"), ("1;2", "not allowed"),
])
def test_rejects(text, message):
  with pytest.raises(ExprError, match=message):
    evaluate(text)


@pytest.mark.parametrize("text,limit", [
    ("9^9^9^9", "exponent at 3 exceeds 64"), ("2**2**2**2**2**2", "exponent at 4 exceeds 64"),
    ("(10^60)^60", "power at 7 larger than 1024 bits"),
    ("99^64*99^64*99^64", "intermediate result larger than 1024 bits"),
    ("9" * 400, "number at 0 is larger than 1024 bits"),
    ("(" * 5000 + "1" + ")" * 5000, "nested deeper than 32"),
    ("-" * 5000 + "1", "nested deeper than 32"), ("2^" * 3000 + "2", "nested deeper than 32"),
])
def test_hostile_inputs_are_stopped_by_a_limit(text, limit):
  # The limit that names the refusal fired before the huge power or the deep recursion
  # was computed.
  with pytest.raises(ExprError, match=re.escape(limit)):
    evaluate(text, Limits(max_chars=20_000))


def test_long_flat_sums_are_fine_and_linear():
  assert evaluate("1+" * 9999 + "1", Limits(max_chars=20_000)) == 10_000


def test_limits():
  assert evaluate("2^64") == 2 ** 64
  with pytest.raises(ExprError, match="exceeds 8"):
    evaluate("2^9", Limits(max_exponent=8))
  with pytest.raises(ExprError, match="powers are not allowed"):
    evaluate("2^2", Limits(allow_power=False))
  assert evaluate("1.5*2", Limits(allow_decimal=True)) == 3
  with pytest.raises(ExprError, match="longer than 4"):
    evaluate("1+2+3", Limits(max_chars=4))
  with pytest.raises(ValueError, match="max_depth must be >= 1"):
    Limits(max_depth=0)


def test_symbolic_mode_allows_only_named_symbols_and_functions():
  limits = Limits(names=frozenset({"x", "C"}), functions=frozenset({"sin", "exp"}))
  assert parse("3*x**2/2 + sin(x) + exp(2*x) + C", limits).value is None
  assert parse("2^3 + 1", limits).value == 9
  for bad in ["y + 1", "x**1000", "x**(1/100)", "sin x", "exp.__class__", "9**9**9 * x",
              "__import__", "os"]:
    with pytest.raises(ExprError):
      parse(bad, limits)
  assert safe_expr.format_number(Fraction(-3, 4)) == "-3/4"
