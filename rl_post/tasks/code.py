"""Code: write a Python function that passes hidden unit tests.

Problems are drawn from the families in `code_problems` (difficulty = the
family's level) with fresh random inputs; the reference implementation
computes the expected values here. Grading is
`rl_post.sandbox.grading`'s: only the calls (``candidate(...)``) enter the
sandbox, the values come back as tagged plain JSON under a per-run nonce,
and are compared here with type checks (`kind="typed"`). Partial credit is
the fraction of tests passed; a run that does not exit cleanly never scores 1.
"""

import copy

import numpy as np

from rl_post.sandbox import ExecResult, grading
from rl_post.tasks import code_problems
from rl_post.tasks.base import Task, Verdict
from rl_post.tasks.sandboxed import Prepared, SandboxedDomain


def call_expr(args: list) -> str:
  """``candidate(a, b)`` for plain argument values (their reprs are literals)."""
  return f"candidate({', '.join(repr(a) for a in args)})"


def graded_verdict(result: grading.GradeResult, format_ok: bool, answer: str) -> Verdict:
  """Score = fraction of tests passed; 1 only if the run also exited cleanly."""
  error = None
  if not result.all_passed:
    reasons = [d for d in result.details if d != "pass"]
    error = f"status={result.status}; {reasons[0] if reasons else ''}"[:300]
  return Verdict(1.0 if result.all_passed else min(result.pass_rate, 0.99), format_ok, answer, error,
                 components={"tests_passed": result.pass_rate})


class Code(SandboxedDomain):
  """Procedurally generated function-writing problems with unit tests."""

  name = "code"

  def __init__(self, num_tests: int = 8, timeout_s: float = 5.0, memory_mb: int = 256):
    if not 2 <= num_tests <= 64:
      raise ValueError(f"code: num_tests must be in [2, 64], got {num_tests}")
    if not timeout_s > 0 or not memory_mb > 0:
      raise ValueError(f"code: timeout_s and memory_mb must be > 0, got {timeout_s}, {memory_mb}")
    self.difficulty_levels = code_problems.LEVELS
    self.num_tests = num_tests
    self.timeout_s = float(timeout_s)
    self.memory_mb = int(memory_mb)
    self._families = {f.name: f for f in code_problems.FAMILIES}

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    families = [f for f in code_problems.FAMILIES if f.level == difficulty]
    family = families[int(rng.integers(len(families)))]
    example = family.inputs(rng)
    arg_lists = [list(a) for a in family.edge_cases][:self.num_tests // 2]
    while len(arg_lists) < self.num_tests:
      arg_lists.append(family.inputs(rng))
    # The reference gets copies: a mutating reference must not alter the inputs shown.
    tests = tuple((call_expr(a), family.reference(*copy.deepcopy(a))) for a in arg_lists)
    shown = family.reference(*copy.deepcopy(example))
    prompt = (f"Write a Python function `{family.signature}` that {family.spec}.\n"
              f"Example: {family.name}({', '.join(map(repr, example))}) == {shown!r}\n"
              f"{self.code_prompt('Python')}")
    index = int(rng.integers(1 << 31))
    return Task(task_id=f"code/{difficulty}/{family.name}/{index}", domain=self.name,
                prompt=prompt, difficulty=difficulty, target=tests,
                metadata={"entry_point": family.name})

  def demonstration(self, task: Task) -> str:
    family = self._families[task.metadata["entry_point"]]
    return self.code_response(f"Implement {family.signature} directly.", family.source(),
                              "python")

  def prepare(self, task: Task, completion: str) -> Prepared | Verdict:
    code = self.program(completion)
    if isinstance(code, Verdict):
      return code
    cases = [grading.FunctionCase(expr, expected, kind="typed", tolerance=1e-9)
             for expr, expected in task.target]
    tests = grading.prepare_python_tests(code, cases, entry_point=task.metadata["entry_point"],
                                         timeout_s=self.timeout_s, memory_mb=self.memory_mb)
    return Prepared(tests.request, tests, code)

  def judge(self, task: Task, prepared: Prepared, result: ExecResult,
            format_ok: bool) -> Verdict:
    del task
    graded = grading.score_python_tests(prepared.state, result)
    return graded_verdict(graded, format_ok, prepared.answer)
