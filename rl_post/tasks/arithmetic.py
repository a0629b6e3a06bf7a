"""Multi-digit addition and subtraction with a column-wise scratchpad.

Difficulty d: the first operand has exactly d digits, the second up to d;
subtraction keeps the result non-negative. The demonstration works the
columns from the least significant digit, "x+y+c=digit,carry", which a
small transformer can learn to execute and RL can sharpen.
"""

import re
import zlib

import numpy as np

from rl_post.tasks.base import (MAX_ANSWER_CHARS, Domain, Task, Verdict, extract_answer,
                                has_reasoning_format)

_INT_RE = re.compile(r"-?\d+")


def _digits_lsb_first(value: int, width: int) -> list[int]:
  return [(value // 10 ** i) % 10 for i in range(width)]


def column_steps(a: int, b: int, op: str, slips: frozenset[int] = frozenset()):
  """The scratchpad columns for a op b (a >= b >= 0 for subtraction).

  Columns listed in `slips` drop the incoming carry/borrow, as a careless
  teacher would; the rest of the work stays consistent with that slip.
  Returns (steps, result).
  """
  width = len(str(a))
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


class Arithmetic(Domain):
  """`What is a+b?` / `What is a-b?` with integer answers."""

  name = "arithmetic"

  def __init__(self, max_difficulty: int = 5, operations: str = "+-",
               demo_slip_rate: float = 0.0):
    """Args:
      max_difficulty: highest level (operand digits).
      operations: which of "+" and "-" to draw.
      demo_slip_rate: probability that a demonstration drops the carry or
        borrow entering a column (an imperfect teacher; 0 = exact). Only
        demonstrations are affected, never verification.
    """
    if not 1 <= max_difficulty <= 18:
      raise ValueError(f"arithmetic: max_difficulty must be in [1, 18], got {max_difficulty}")
    if not operations or set(operations) - set("+-"):
      raise ValueError(f"arithmetic: operations must be a non-empty subset of '+-', "
                       f"got {operations!r}")
    if not 0.0 <= demo_slip_rate <= 1.0:
      raise ValueError(f"arithmetic: demo_slip_rate must be in [0, 1], got {demo_slip_rate}")
    self.difficulty_levels = tuple(range(1, max_difficulty + 1))
    self.operations = operations
    self.demo_slip_rate = demo_slip_rate

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    low = 0 if difficulty == 1 else 10 ** (difficulty - 1)
    a = int(rng.integers(low, 10 ** difficulty))
    b = int(rng.integers(0, 10 ** int(rng.integers(1, difficulty + 1))))
    op = self.operations[int(rng.integers(len(self.operations)))]
    if op == "-" and b > a:  # both have <= d digits and a has d: a stays d digits
      a, b = b, a
    result = a + b if op == "+" else a - b
    return Task(task_id=f"arithmetic/{difficulty}/{a}{op}{b}", domain=self.name,
                prompt=f"What is {a}{op}{b}?", difficulty=difficulty, target=result,
                metadata={"a": a, "b": b, "op": op})

  def demonstration(self, task: Task) -> str:
    m = task.metadata
    slips = frozenset()
    if self.demo_slip_rate > 0:  # deterministic per task, so resumed runs see the same data
      rng = np.random.default_rng(zlib.crc32(task.task_id.encode()))
      width = len(str(m["a"]))
      slips = frozenset(np.flatnonzero(rng.random(width) < self.demo_slip_rate).tolist())
    steps, result = column_steps(m["a"], m["b"], m["op"], slips)
    return f"<think>{' '.join(steps)}</think>\n<answer>{result}</answer>"

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # parses text only
    format_ok = has_reasoning_format(completion)
    answer = extract_answer(completion)
    if answer is None:
      return Verdict(False, format_ok, None, "no <answer> tag")
    if len(answer) > MAX_ANSWER_CHARS:
      return Verdict(False, format_ok, answer[:MAX_ANSWER_CHARS], "answer too long")
    if not _INT_RE.fullmatch(answer):
      return Verdict(False, format_ok, answer, "answer is not an integer")
    return Verdict(float(int(answer) == task.target), format_ok, answer, None)
