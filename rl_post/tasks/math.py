"""Math with LaTeX answers, checked by math-verify under our own time limit.

Levels (each a generated problem with an exact gold answer in LaTeX):
  1. fraction arithmetic         a/b + c/d          -> \\frac{p}{q}
  2. a linear equation            ax + b = cx + d    -> a fraction
  3. a quadratic's real roots     x^2 + px + q = 0   -> a set \\{r_1, r_2\\}
  4. an inequality's solutions    ax + b < c, |x - m| <= r  -> an interval
Answers are compared by meaning, so "3/4", "\\frac{6}{8}" and "0.75" all
match \\frac{3}{4}. math-verify runs in a child process (`math_worker`),
so a hostile answer costs at most `timeout_s`.
"""

from fractions import Fraction

import numpy as np

from rl_post.tasks.base import MAX_ANSWER_CHARS, Domain, Task, Verdict
from rl_post.tasks.math_worker import CheckTimeout, MathChecker

_FORMAT = ("Show your work in <think> </think> tags and give only the final answer, in LaTeX, "
           "in <answer> </answer> tags.")


def latex_number(value: Fraction) -> str:
  if value.denominator == 1:
    return str(value.numerator)
  sign = "-" if value < 0 else ""
  return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _nonzero(rng, low, high):
  value = 0
  while value == 0:
    value = int(rng.integers(low, high + 1))
  return value


def _fractions(rng):
  a, c = _nonzero(rng, -9, 9), _nonzero(rng, -9, 9)
  b, d = int(rng.integers(2, 13)), int(rng.integers(2, 13))
  op = "+" if rng.random() < 0.5 else "-"
  if c < 0:  # "a/b - c/d" rather than "a/b + -c/d"
    c, op = -c, "-" if op == "+" else "+"
  value = Fraction(a, b) + (Fraction(c, d) if op == "+" else -Fraction(c, d))
  question = f"Compute $\\frac{{{a}}}{{{b}}} {op} \\frac{{{c}}}{{{d}}}$ as a reduced fraction."
  steps = [f"common denominator {b * d // np.gcd(b, d)}", f"result {value}"]
  return question, latex_number(value), steps


def _linear(rng):
  a, c = _nonzero(rng, -9, 9), _nonzero(rng, -9, 9)
  while c == a:
    c = _nonzero(rng, -9, 9)
  b, d = int(rng.integers(-20, 21)), int(rng.integers(-20, 21))
  x = Fraction(d - b, a - c)
  question = f"Solve for $x$: ${a}x + {b} = {c}x + {d}$."
  steps = [f"({a}-{c})x = {d}-({b})", f"x = {x}"]
  return question.replace("+ -", "- "), latex_number(x), steps


def _quadratic(rng):
  r1, r2 = int(rng.integers(-12, 13)), int(rng.integers(-12, 13))
  while r2 == r1:
    r2 = int(rng.integers(-12, 13))
  p, q = -(r1 + r2), r1 * r2
  question = (f"Find all real solutions of $x^2 + {p}x + {q} = 0$. "
              "Give them as a set, e.g. $\\{1, 2\\}$.").replace("+ -", "- ")
  steps = [f"two numbers with sum {-p} and product {q}: {r1} and {r2}"]
  return question, f"\\{{{min(r1, r2)}, {max(r1, r2)}\\}}", steps


def _inequality(rng):
  if rng.random() < 0.5:
    m, r = int(rng.integers(-10, 11)), int(rng.integers(1, 10))
    strict = bool(rng.random() < 0.5)
    sign, (lo, hi) = ("<", "()") if strict else ("\\le", "[]")
    question = f"Solve $|x - {m}| {sign} {r}$ and give the solution set as an interval."
    steps = [f"{m}-{r} {sign} x {sign} {m}+{r}"]
    return question.replace("- -", "+ "), f"{lo}{m - r}, {m + r}{hi}", steps
  a, b, c = _nonzero(rng, -6, 6), int(rng.integers(-20, 21)), int(rng.integers(-20, 21))
  bound = Fraction(c - b, a)
  question = (f"Solve ${a}x + {b} < {c}$ and give the solution set as an interval."
              ).replace("+ -", "- ")
  if a > 0:
    answer = f"(-\\infty, {latex_number(bound)})"
  else:
    answer = f"({latex_number(bound)}, \\infty)"
  steps = [f"{a}x < {c - b}", "dividing by a negative number flips the inequality" if a < 0
           else "divide by a positive number", f"bound {bound}"]
  return question, answer, steps


_GENERATORS = {1: _fractions, 2: _linear, 3: _quadratic, 4: _inequality}


class Math(Domain):
  """Generated algebra problems with LaTeX answers (fractions, sets, intervals)."""

  name = "math"
  answer_formats = ("tags", "boxed", "last_line")  # LaTeX answers are not plain numbers
  difficulty_levels = tuple(_GENERATORS)

  def __init__(self, timeout_s: float = 5.0):
    """Args:
      timeout_s: time limit of one math-verify check; an overrun scores 0.
    """
    self.checker = MathChecker(timeout_s)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    question, answer, steps = _GENERATORS[difficulty](rng)
    return Task(task_id=f"math/{difficulty}/{question}", domain=self.name,
                prompt=self.ask(question, "the final answer, in LaTeX,", _FORMAT),
                difficulty=difficulty, target=answer,
                metadata={"steps": steps})

  def demonstration(self, task: Task) -> str:
    return self.respond("; ".join(task.metadata["steps"]), task.target)

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # math-verify runs in our own child process, not the code sandbox
    reading = self.read(completion)
    format_ok, answer = reading.format_ok, reading.answer
    if answer is None:
      return Verdict(0.0, format_ok, None, self.no_answer)
    if not answer:
      return Verdict(0.0, format_ok, answer, "empty answer")
    if len(answer) > MAX_ANSWER_CHARS:
      return Verdict(0.0, format_ok, answer[:MAX_ANSWER_CHARS], "answer too long")
    if answer == task.target:
      return Verdict(1.0, format_ok, answer)
    try:
      equal, error = self.checker.equal(task.target, answer)
    except CheckTimeout as e:
      return Verdict(0.0, format_ok, answer, f"timeout: {e}")
    return Verdict(float(equal), format_ok, answer, None if equal else error)
