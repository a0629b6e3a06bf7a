"""Countdown: combine the given numbers with + - * / to reach a target.

Difficulty d uses d + 2 numbers (levels 1-4: 3 to 6 numbers), every one of
which must appear exactly once. The generator builds the target from a
random combination of all the numbers with positive whole intermediate
results, so a solution always exists; the demonstration writes that
combination's steps and expression. The verifier evaluates the answer with
`safe_expr` (our own parser, no `eval`, no powers, bounded sizes).

It also checks the work (`step_credit`): a written step "a*b=v" is right
when its arithmetic is exact and both operands are still available (given
numbers not used yet, or earlier steps' results). The share of right steps
is the `process` component and each step a `Verdict.step_scores` span.
"""

import collections
import re
from fractions import Fraction

import numpy as np

from rl_post.tasks import safe_expr
from rl_post.tasks.base import MAX_ANSWER_CHARS, Domain, Task, Verdict, think_span

_LIMITS = safe_expr.Limits(max_chars=MAX_ANSWER_CHARS, max_depth=32, max_bits=256,
                           allow_power=False, allow_decimal=False)
_SMALL = np.arange(1, 11)
_LARGE = np.array([25, 50, 75, 100])
_MAX_TARGET = 1000
MAX_EXTRA_STEPS = 8
_STEP_RE = re.compile(r"(?<!\d)(\d{1,9})([-+*/])(\d{1,9})=(\d{1,9})(?!\d)")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b if b and a % b == 0 else None}


def _combine(rng: np.random.Generator, a: int, b: int):
  """A random op on a, b with a positive whole result: (expr_op, result) or None."""
  for op in rng.permutation(["+", "-", "*", "/"]):
    if op == "+":
      return op, a + b
    if op == "-" and a != b:
      return op, abs(a - b)
    if op == "*" and a * b <= 10 * _MAX_TARGET:
      return op, a * b
    if op == "/" and min(a, b) > 1 and max(a, b) % min(a, b) == 0:
      return op, max(a, b) // min(a, b)
  return None


def _solution(rng: np.random.Generator, numbers: list[int]):
  """Combines all numbers pairwise at random; returns (steps, expression, value)."""
  pool = [(str(n), n) for n in numbers]
  steps = []
  while len(pool) > 1:
    i, j = sorted(rng.choice(len(pool), size=2, replace=False).tolist())
    (ea, a), (eb, b) = pool[i], pool[j]
    combined = _combine(rng, a, b)
    if combined is None:
      return None
    op, value = combined
    if op in "-/" and b > a:  # larger operand first keeps the result positive and whole
      (ea, a), (eb, b) = (eb, b), (ea, a)
    steps.append(f"{a}{op}{b}={value}")
    expr = f"({ea}{op}{eb})"
    pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [(expr, value)]
  expr, value = pool[0]
  return steps, expr[1:-1] if expr.startswith("(") else expr, value


def step_credit(numbers, completion: str) -> tuple[float, tuple[tuple[int, int, float], ...]]:
  """Process credit of the steps written in `completion`'s <think> section.

  A step "a op b=v" is right iff a op b == v exactly (division without
  remainder) and a and b are available: given numbers not used yet or
  results of earlier right steps (a right step uses them up and adds v).
  Returns (right steps over max(len(numbers) - 1, written steps); one
  (start, end, 0 or 1) character span per written step, at most
  len(numbers) - 1 + MAX_EXTRA_STEPS).
  """
  section = think_span(completion)
  if section is None:
    return 0.0, ()
  expected = len(numbers) - 1
  pool = collections.Counter(int(n) for n in numbers)
  spans = []
  for k, m in enumerate(_STEP_RE.finditer(completion, *section)):
    if k == expected + MAX_EXTRA_STEPS:  # bounded work on hostile completions
      break
    a, op, b, value = int(m[1]), m[2], int(m[3]), int(m[4])
    need = collections.Counter([a, b])
    right = _OPS[op](a, b) == value and not need - pool
    if right:
      pool = pool - need + collections.Counter([value])
    spans.append((m.start(), m.end(), float(right)))
  return sum(s for _, _, s in spans) / max(expected, len(spans), 1), tuple(spans)


class Countdown(Domain):
  """`Using the numbers [...], write an expression equal to T`."""

  name = "countdown"
  answer_formats = ("tags", "boxed", "last_line")  # the answer is an expression
  difficulty_levels = (1, 2, 3, 4)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    count = difficulty + 2
    for _ in range(1000):  # few retries: most draws reach a target in range
      n_large = int(rng.integers(0, min(2, count - 2) + 1))
      numbers = (rng.choice(_LARGE, n_large, replace=False).tolist()
                 + rng.choice(_SMALL, count - n_large).tolist())
      numbers = [int(n) for n in rng.permutation(numbers)]
      found = _solution(rng, numbers)
      if found is not None and 10 <= found[2] <= _MAX_TARGET and found[2] not in numbers:
        break
    else:
      raise RuntimeError(f"countdown: no target in range after 1000 draws at level {difficulty}")
    steps, expr, target = found
    prompt = self.ask(
        f"Using the numbers {numbers}, write an arithmetic expression that equals "
        f"{target}. Use each number exactly once, with +, -, *, / and parentheses.",
        "the expression", "Show your work in <think> </think> tags and give only the expression "
        "in <answer> </answer> tags, for example <answer>(1+2)*3</answer>.")
    return Task(task_id=f"countdown/{difficulty}/{'-'.join(map(str, numbers))}={target}",
                domain=self.name, prompt=prompt, difficulty=difficulty, target=target,
                metadata={"numbers": numbers, "solution": expr, "steps": steps})

  def demonstration(self, task: Task) -> str:
    return self.respond(", ".join(task.metadata["steps"]), task.metadata["solution"])

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # parses text only
    reading = self.read(completion)
    format_ok, answer = reading.format_ok, reading.answer
    process, spans = step_credit(task.metadata["numbers"], completion)
    if answer is None:
      return Verdict(0.0, format_ok, None, self.no_answer, components={"process": process},
                     step_scores=spans)
    credit = dict(process=process)  # the work is credited whatever the answer
    if "=" in answer:  # "expr = target" is accepted; the target part is ignored
      answer = answer.split("=", 1)[0].strip()
    try:
      parsed = safe_expr.parse(answer, _LIMITS)
    except safe_expr.ExprError as e:
      return Verdict(0.0, format_ok, answer[:MAX_ANSWER_CHARS], f"invalid expression: {e}",
                     components=credit, step_scores=spans)
    uses_numbers = (collections.Counter(parsed.numbers)
                    == collections.Counter(Fraction(n) for n in task.metadata["numbers"]))
    reaches = parsed.value == task.target
    return Verdict(float(uses_numbers and reaches), format_ok, answer,
                   None if uses_numbers else "does not use each number exactly once",
                   components=dict(credit, uses_numbers=float(uses_numbers),
                                   reaches_target=float(reaches)),
                   step_scores=spans)
