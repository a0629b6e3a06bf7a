"""Multi-digit addition and subtraction with a column-wise scratchpad.

Difficulty d: the first operand has exactly d digits, the second up to d;
subtraction keeps the result non-negative. With `short_first`, levels
SHORT_FIRST + d (d >= 2) hold sums written with the shorter operand first
("7+58"): the same columns, but a model that only saw the longer operand
first has to align the digits differently, with no new length or fact to
learn. The demonstration works the columns from the least significant
digit, "x+y+c=digit,carry" (x from the first operand written, zero-padded),
which a small transformer can learn to execute and RL can sharpen.

Besides the outcome, `verify` checks the work: each written column step is
right or wrong (`column_credit`), reported as process credit (the
`process` component, the share of the expected columns written right, and
`Verdict.step_scores`, one span per written step), so a reward can credit
a response whose answer is wrong but most of whose columns are right.
"""

import re
import zlib

import numpy as np

from rl_post.tasks.base import MAX_ANSWER_CHARS, Domain, Task, Verdict, think_span

_INT_RE = re.compile(r"-?\d+")
MAX_EXTRA_STEPS = 8
_STEP_RE = re.compile(r"(\d)([+-])(\d)([+-])(\d)=(\d),(\d)")
SHORT_FIRST = 100  # level SHORT_FIRST + d: a d-digit sum written shorter operand first


def _width(a: int, b: int) -> int:
  """Columns of a op b: the longer operand's digits (the shorter is zero-padded)."""
  return max(len(str(a)), len(str(b)))


def _digits_lsb_first(value: int, width: int) -> list[int]:
  return [(value // 10 ** i) % 10 for i in range(width)]


def column_steps(a: int, b: int, op: str, slips: frozenset[int] = frozenset()):
  """The scratchpad columns for a op b (a >= b >= 0 for subtraction).

  Columns listed in `slips` drop the incoming carry/borrow, as a careless
  teacher would; the rest of the work stays consistent with that slip.
  Returns (steps, result).
  """
  width = _width(a, b)
  steps, carry, digits = [], 0, []
  for column, (x, y) in enumerate(zip(_digits_lsb_first(a, width), _digits_lsb_first(b, width))):
    if column in slips:
      carry = 0
    if op == "+":
      total = x + y + carry
      digit, carry_out = total % 10, total // 10
    else:
      total = x - y - carry
      digit, carry_out = total % 10, int(total < 0)
    steps.append(f"{x}{op}{y}{op}{carry}={digit},{carry_out}")
    digits.append(digit)
    carry = carry_out
  if carry and op == "+":
    steps.append("0+0+1=1,0")
    digits.append(1)
  result = sum(d * 10 ** i for i, d in enumerate(digits))
  if op == "-" and carry:  # a slip left a borrow out of the top column
    result -= 10 ** len(digits)
  return steps, result


def column_credit(a: int, b: int, op: str, completion: str
                  ) -> tuple[float, tuple[tuple[int, int, float], ...]]:
  """Process credit of the column work in `completion` for a op b.

  The k-th step written in the <think> section ("x+y+c=d,k") is right iff
  it is the k-th column of `column_steps(a, b, op)`: the column's two
  digits (in either order for a sum: a shorter operand written first puts
  its digit first), the true carry or borrow into the column, the digit and
  the carry out. Returns (the right steps over max(expected, written)
  steps, so missing or extra steps lower it; one (start, end, 0 or 1)
  character span per written step; steps past the expected ones plus
  MAX_EXTRA_STEPS are not read).
  """
  expected, _ = column_steps(a, b, op)
  section = think_span(completion)
  if section is None:
    return 0.0, ()
  spans = []
  for k, m in enumerate(_STEP_RE.finditer(completion, *section)):
    if k == len(expected) + MAX_EXTRA_STEPS:  # bounded work on hostile completions
      break
    spans.append((m.start(), m.end(), float(k < len(expected)
                                            and _same_step(m.groups(), expected[k]))))
  right = sum(score for _, _, score in spans)
  return right / max(len(expected), len(spans)), tuple(spans)


def _same_step(written: tuple[str, ...], expected: str) -> bool:
  x, op, y, op2, carry, digit, out = written
  want = _STEP_RE.fullmatch(expected).groups()
  if op != op2 or op != want[1] or (carry, digit, out) != want[4:]:
    return False
  if op == "+":
    return sorted((x, y)) == sorted((want[0], want[2]))
  return (x, y) == (want[0], want[2])


class Arithmetic(Domain):
  """`What is a+b?` / `What is a-b?` with integer answers."""

  name = "arithmetic"

  def __init__(self, max_difficulty: int = 5, operations: str = "+-",
               demo_slip_rate: float = 0.0, short_first: bool = False,
               answer_only_rate: float = 0.0):
    """Args:
      max_difficulty: highest level (operand digits).
      operations: which of "+" and "-" to draw.
      demo_slip_rate: probability that a demonstration drops the carry or
        borrow entering a column (an imperfect teacher; 0 = exact). Only
        demonstrations are affected, never verification.
      short_first: also offer levels SHORT_FIRST + d for d in 2..max_difficulty:
        a d-digit first operand plus a strictly shorter one, written shorter
        first ("7+58"); sums only.
      answer_only_rate: probability that a demonstration gives the answer
        without the column work ("<think></think>" then the answer), as
        human-written data often does; every such answer is still exact.
        Which style completes more tasks is left for RL to find.
    """
    if not 1 <= max_difficulty <= 18:
      raise ValueError(f"arithmetic: max_difficulty must be in [1, 18], got {max_difficulty}")
    if not operations or set(operations) - set("+-"):
      raise ValueError(f"arithmetic: operations must be a non-empty subset of '+-', "
                       f"got {operations!r}")
    if not 0.0 <= demo_slip_rate <= 1.0:
      raise ValueError(f"arithmetic: demo_slip_rate must be in [0, 1], got {demo_slip_rate}")
    if not 0.0 <= answer_only_rate <= 1.0:
      raise ValueError(f"arithmetic: answer_only_rate must be in [0, 1], got {answer_only_rate}")
    if short_first and "+" not in operations:
      raise ValueError("arithmetic: short_first levels are sums; operations must include '+'")
    if short_first and max_difficulty < 2:
      raise ValueError("arithmetic: short_first needs max_difficulty >= 2 (a shorter operand)")
    self.difficulty_levels = tuple(range(1, max_difficulty + 1)) + (
        tuple(SHORT_FIRST + d for d in range(2, max_difficulty + 1)) if short_first else ())
    self.operations = operations
    self.demo_slip_rate = demo_slip_rate
    self.answer_only_rate = answer_only_rate

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    if difficulty > SHORT_FIRST:
      return self._short_first(rng, difficulty)
    low = 0 if difficulty == 1 else 10 ** (difficulty - 1)
    a = int(rng.integers(low, 10 ** difficulty))
    b = int(rng.integers(0, 10 ** int(rng.integers(1, difficulty + 1))))
    op = self.operations[int(rng.integers(len(self.operations)))]
    if op == "-" and b > a:  # both have <= d digits and a has d: a stays d digits
      a, b = b, a
    result = a + b if op == "+" else a - b
    return Task(task_id=f"arithmetic/{difficulty}/{a}{op}{b}", domain=self.name,
                prompt=self.ask(f"What is {a}{op}{b}?", "the answer", ""), difficulty=difficulty,
                target=result,
                metadata={"a": a, "b": b, "op": op})

  def _short_first(self, rng: np.random.Generator, difficulty: int) -> Task:
    digits = difficulty - SHORT_FIRST
    long = int(rng.integers(10 ** (digits - 1), 10 ** digits))
    short_digits = int(rng.integers(1, digits))
    short = int(rng.integers(0 if short_digits == 1 else 10 ** (short_digits - 1),
                             10 ** short_digits))
    return Task(task_id=f"arithmetic/{difficulty}/{short}+{long}", domain=self.name,
                prompt=self.ask(f"What is {short}+{long}?", "the answer", ""),
                difficulty=difficulty, target=short + long,
                metadata={"a": short, "b": long, "op": "+"})

  def demonstration(self, task: Task) -> str:
    m = task.metadata
    if self.answer_only_rate > 0 or self.demo_slip_rate > 0:
      # Deterministic per task, so resumed runs see the same data.
      rng = np.random.default_rng(zlib.crc32(task.task_id.encode()))
    if self.answer_only_rate > 0 and rng.random() < self.answer_only_rate:
      return self.respond("", str(task.target))
    slips = frozenset()
    if self.demo_slip_rate > 0:
      width = _width(m["a"], m["b"])
      slips = frozenset(np.flatnonzero(rng.random(width) < self.demo_slip_rate).tolist())
    steps, result = column_steps(m["a"], m["b"], m["op"], slips)
    return self.respond(" ".join(steps), str(result))

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # parses text only
    reading = self.read(completion)
    format_ok, answer = reading.format_ok, reading.answer
    m = task.metadata
    process, spans = column_credit(m["a"], m["b"], m["op"], completion)
    # the work is credited whatever the answer
    credit = dict(components={"process": process}, step_scores=spans)
    if answer is None:
      return Verdict(False, format_ok, None, self.no_answer, **credit)
    if len(answer) > MAX_ANSWER_CHARS:
      return Verdict(False, format_ok, answer[:MAX_ANSWER_CHARS], "answer too long", **credit)
    if not _INT_RE.fullmatch(answer):
      return Verdict(False, format_ok, answer, "answer is not an integer", **credit)
    return Verdict(float(int(answer) == task.target), format_ok, answer, None, **credit)
