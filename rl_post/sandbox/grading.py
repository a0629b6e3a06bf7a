"""Grading that a candidate cannot fake: expected values never enter the sandbox.

`grade_python_tests` runs the candidate program and a small driver in the
sandbox. The driver evaluates each test's *input side* (e.g.
``candidate(3, 4)``) and writes the values, encoded as tagged JSON of plain
types, to a result file named by a fresh per-run nonce. The trusted side
(this module, in the host) decodes them, type-checks them and compares them
with the expected values it alone holds. A case passes only if the record
carries the nonce, has one entry per expected case, and the decoded value
matches. So ``os._exit(0)``, ``SystemExit``, closed stdout, printed "PASSED",
``__eq__`` that always returns True (not a plain type), patched builtins or
json (the host parses the text itself), frame walks into the driver (it
holds no expected values) and NUL bytes in the source (compile error) all
fail.

`grade_stdio` runs stdin/stdout problems; the expected output stays here.
"""

import ast
import dataclasses
import json
import secrets
from typing import Any, Callable, Optional, Sequence, Tuple

from rl_post.sandbox import request as request_lib
from rl_post.sandbox import values

decode_value = values.decode_value

_KINDS = ("eq", "typed", "predicate", "is", "truthy", "falsy")


@dataclasses.dataclass(frozen=True)
class FunctionCase:
  """One test: `expr` is evaluated in the sandbox, `expected` stays here.

  Attributes:
    expr: Python expression over the candidate's names (``candidate`` is
      bound to the entry point), e.g. ``"candidate([1, 2], 3)"``.
    expected: plain value (None, bool, int, float, str, bytes, list, tuple,
      dict, set, frozenset) compared with the decoded result.
    kind: "eq" (==, with `tolerance` for floats), "typed" (== with the
      same container and scalar types at every level, bool never equal to
      int; ints and floats compare as numbers within `tolerance`), "is"
      (True/False/None), "truthy", "falsy", or "predicate" (`predicate`, a
      trusted host-side function, accepts the decoded value; for answers
      that are not unique, such as any root of a polynomial).
    tolerance: absolute tolerance for float comparisons (kinds "eq",
      "typed"; relative too for "typed").
    predicate: for kind "predicate", value -> bool, run here on the
      decoded plain value (never on the candidate's objects).
  """
  expr: str
  expected: Any = None
  kind: str = "eq"
  tolerance: Optional[float] = None
  predicate: Optional[Callable[[Any], bool]] = None

  def __post_init__(self):
    if not isinstance(self.expr, str) or not self.expr.strip():
      raise ValueError(f"FunctionCase.expr must be a non-empty str, got "
                       f"{self.expr!r}")
    if self.kind not in _KINDS:
      raise ValueError(f"FunctionCase.kind must be one of {_KINDS}, got "
                       f"{self.kind!r}")
    if (self.kind == "predicate") != (self.predicate is not None):
      raise ValueError("FunctionCase.predicate is required for kind "
                       "'predicate' and only allowed there")
    try:
      ast.parse(self.expr, mode="eval")
    except SyntaxError as e:
      raise ValueError(f"FunctionCase.expr is not an expression: "
                       f"{self.expr!r} ({e.msg})") from None


@dataclasses.dataclass(frozen=True)
class GradeResult:
  passed: int
  total: int
  all_passed: bool
  status: str
  details: Tuple[str, ...]
  exec_results: tuple = ()

  @property
  def pass_rate(self):
    return self.passed / self.total if self.total else 0.0


# -- assertion parsing (host side) -----------------------------------------
def _literal(node):
  try:
    return True, ast.literal_eval(node)
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    return False, None


def _case_from_assert(node):
  test = node.test
  src = ast.unparse
  if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
    return FunctionCase(src(test.operand), kind="falsy")
  if isinstance(test, ast.Compare) and len(test.ops) == 1:
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.Eq):
      ok, value = _literal(right)
      if ok:
        return FunctionCase(src(left), value)
      ok, value = _literal(left)
      if ok:
        return FunctionCase(src(right), value)
    if (isinstance(op, ast.Is) and isinstance(right, ast.Constant) and
        right.value in (True, False, None)):
      return FunctionCase(src(left), right.value, kind="is")
    if (isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call) and
        isinstance(left.func, ast.Name) and left.func.id == "abs" and
        len(left.args) == 1 and isinstance(left.args[0], ast.BinOp) and
        isinstance(left.args[0].op, ast.Sub)):
      ok_tol, tol = _literal(right)
      a, b = left.args[0].left, left.args[0].right
      for expr, lit in ((a, b), (b, a)):
        ok, value = _literal(lit)
        if ok and ok_tol and isinstance(tol, (int, float)):
          return FunctionCase(src(expr), value, tolerance=float(tol))
  if isinstance(test, ast.Compare) or isinstance(test, ast.BoolOp):
    return None
  return FunctionCase(src(test), kind="truthy")


def parse_assert_tests(source):
  """Turns HumanEval/MBPP-style ``assert`` lines into FunctionCases.

  Asserts may sit at top level or directly in a top-level function body
  (``def check(candidate): ...``). Supported forms: ``X == literal``,
  ``literal == X``, ``X is True/False/None``, ``abs(X - literal) < tol``,
  ``not X`` and bare ``X``. Anything else raises ValueError (write a
  FunctionCase instead) so no test is silently dropped.
  """
  try:
    tree = ast.parse(source)
  except SyntaxError as e:
    raise ValueError(f"tests: not valid Python: {e}") from None
  cases = []
  for top in tree.body:
    body = top.body if isinstance(top, ast.FunctionDef) else [top]
    for stmt in body:
      if isinstance(stmt, ast.Assert):
        case = _case_from_assert(stmt)
        if case is None:
          raise ValueError(f"tests: unsupported assertion at line "
                           f"{stmt.lineno}: {ast.unparse(stmt)}")
        cases.append(case)
      elif any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
        raise ValueError(f"tests: assertion nested in a "
                         f"{type(stmt).__name__} at line {stmt.lineno} is "
                         "not supported; list the cases as FunctionCases")
  if not cases:
    raise ValueError("tests: no assertions found")
  return cases


# -- the driver that runs inside the sandbox --------------------------------
_DRIVER = r'''
def _rl_post_driver(nonce, exprs, entry_point):
  import json, os
  _type, _len, _repr, _list, _sorted = type, len, repr, list, sorted
  _dumps, _open = json.dumps, os.open
  tags = {list: "L", tuple: "T", set: "S", frozenset: "F"}

  def enc(v, depth):
    t = _type(v)
    if depth > %(max_depth)d:
      raise ValueError("value nested too deeply")
    if v is None or t is bool or t is int or t is float or t is str:
      return v
    if t is bytes:
      return {"B": v.hex()}
    if t in tags:
      return {tags[t]: [enc(x, depth + 1) for x in v]}
    if t is dict:
      return {"D": [[enc(k, depth + 1), enc(x, depth + 1)]
                    for k, x in v.items()]}
    raise TypeError("result of type %%s is not a plain value" %% t.__name__)

  ns = {"__name__": "solution", "__builtins__": __builtins__}
  results = []
  try:
    with open("solution.py", "rb") as f:
      source = f.read()
    exec(compile(source, "solution.py", "exec", dont_inherit=True), ns)
    if entry_point:
      ns["candidate"] = ns[entry_point]
    ok = True
  except BaseException as e:
    ok = False
    err = "program failed: %%s: %%s" %% (_type(e).__name__, e)
  for expr in exprs:
    if not ok:
      results.append([False, err[:500]])
      continue
    try:
      value = eval(compile(expr, "<test>", "eval", dont_inherit=True), ns)
      results.append([True, enc(value, 0)])
    except BaseException as e:
      results.append([False, ("%%s: %%s" %% (_type(e).__name__, e))[:500]])
  text = _dumps({"nonce": nonce, "results": results})
  fd = _open(".rl_post_result_" + nonce,
             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
  os.write(fd, text.encode("utf-8"))
  os.close(fd)

_rl_post_driver(%(nonce)r, %(exprs)s, %(entry_point)r)
'''


def _check(case, value):
  if case.kind == "predicate":
    return bool(case.predicate(value))
  if case.kind == "typed":
    return values.typed_equal(value, case.expected, case.tolerance or 0.0)
  if case.kind == "is":
    return value is case.expected
  if case.kind == "truthy":
    return bool(value)
  if case.kind == "falsy":
    return not value
  if case.tolerance is not None:
    return values.close_enough(value, case.expected, case.tolerance)
  return value == case.expected


@dataclasses.dataclass(frozen=True)
class PreparedTests:
  """One grading run, built but not yet executed (see `prepare_python_tests`).

  `request` goes to the sandbox (alone or in a `run_many` batch); `nonce`
  and `cases` (with the expected values) stay here for `score_python_tests`.
  """
  request: request_lib.RunRequest
  nonce: str
  cases: Tuple[FunctionCase, ...]


def prepare_python_tests(program, tests, *, entry_point=None, timeout_s=None,
                         memory_mb=None):
  """The sandbox request that grades `program` against `tests`.

  Args: as `grade_python_tests`, without the sandbox.
  Returns:
    PreparedTests; run `.request`, then pass the ExecResult to
    `score_python_tests`.
  """
  if isinstance(program, bytes):
    program_bytes = program
  elif isinstance(program, str):
    program_bytes = program.encode("utf-8", "surrogateescape")
  else:
    raise ValueError(f"program must be str or bytes, got "
                     f"{type(program).__name__}")
  cases = parse_assert_tests(tests) if isinstance(tests, str) else list(tests)
  if not cases or not all(isinstance(c, FunctionCase) for c in cases):
    raise ValueError("tests must be assert source or a non-empty list of "
                     "FunctionCase")
  if entry_point is not None and not (isinstance(entry_point, str) and
                                      entry_point.isidentifier()):
    raise ValueError(f"entry_point must be an identifier, got "
                     f"{entry_point!r}")
  nonce = secrets.token_hex(16)
  driver = _DRIVER % {"nonce": nonce, "max_depth": values.MAX_DEPTH,
                      "exprs": repr([c.expr for c in cases]),
                      "entry_point": entry_point}
  req = request_lib.RunRequest(driver, files={"solution.py": program_bytes},
                               timeout_s=timeout_s, memory_mb=memory_mb)
  return PreparedTests(req, nonce, tuple(cases))


def score_python_tests(prepared, res):
  """The GradeResult of `prepared` given its run's ExecResult `res`."""
  cases, nonce = prepared.cases, prepared.nonce
  total = len(cases)
  record = res.files.get(".rl_post_result_" + nonce)
  details = []
  if record is None:
    reason = f"no result record (status={res.status})"
    return GradeResult(0, total, False, res.status, (reason,) * total, (res,))
  try:
    parsed = json.loads(record.decode("utf-8"))
    if (type(parsed) is not dict or parsed.get("nonce") != nonce or
        type(parsed.get("results")) is not list or
        len(parsed["results"]) != total):
      raise values.DecodeError("record does not match this run")
    entries = parsed["results"]
  except (ValueError, UnicodeDecodeError, RecursionError, values.DecodeError) as e:
    return GradeResult(0, total, False, res.status,
                       (f"bad result record: {e}",) * total, (res,))
  passed = 0
  for case, entry in zip(cases, entries):
    try:
      if type(entry) is not list or len(entry) != 2 or entry[0] is not True:
        raise values.DecodeError(str(entry[1] if type(entry) is list and
                               len(entry) == 2 else "bad entry")[:300])
      value = values.decode(entry[1])
      good = _check(case, value)
      details.append("pass" if good else f"fail: {case.expr} -> "
                     f"{repr(value)[:200]}")
      passed += good
    except (values.DecodeError, RecursionError, ValueError) as e:
      details.append(f"fail: {case.expr}: {e}")
  all_passed = passed == total and res.status == "ok"
  return GradeResult(passed, total, all_passed, res.status, tuple(details),
                     (res,))


def grade_python_tests(sandbox, program, tests, *, entry_point=None,
                       timeout_s=None, memory_mb=None):
  """Runs `program` against `tests` in `sandbox`; the verdict is made here.

  Args:
    sandbox: a Sandbox.
    program: the candidate's Python source (str or bytes).
    tests: assert source (see parse_assert_tests) or FunctionCases.
    entry_point: name bound to ``candidate`` in test expressions.
    timeout_s, memory_mb: limits for the whole run (all cases).

  Returns:
    GradeResult; `all_passed` only if every expected case passed.
  """
  prepared = prepare_python_tests(program, tests, entry_point=entry_point,
                                  timeout_s=timeout_s, memory_mb=memory_mb)
  req = prepared.request
  res = sandbox.run(req.code, files=req.files, timeout_s=req.timeout_s,
                    memory_mb=req.memory_mb)
  return score_python_tests(prepared, res)


def _normalise(text, compare):
  if compare == "exact":
    return text
  if compare == "tokens":
    return text.split()
  lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
  while lines and not lines[-1]:
    lines.pop()
  return lines


def grade_stdio(sandbox, program, cases: Sequence[Tuple[str, str]], *,
                language="python", compare="lines", timeout_s=None,
                memory_mb=None):
  """Runs `program` once per (stdin, expected_stdout) case, in parallel.

  A case passes when the run's status is "ok" and its stdout matches under
  `compare`: "lines" (trailing spaces and blank lines ignored), "tokens"
  (whitespace-separated) or "exact". Expected outputs stay in the host.
  """
  if compare not in ("lines", "tokens", "exact"):
    raise ValueError(f"compare must be 'lines', 'tokens' or 'exact', got "
                     f"{compare!r}")
  cases = list(cases)
  if not cases:
    raise ValueError("cases must be a non-empty list of (stdin, expected)")
  for i, case in enumerate(cases):
    if (not isinstance(case, (tuple, list)) or len(case) != 2 or
        not all(isinstance(x, str) for x in case)):
      raise ValueError(f"cases[{i}] must be a (stdin, expected_stdout) pair "
                       "of str")
  reqs = [request_lib.RunRequest(program, language, stdin, None, timeout_s,
                                 memory_mb) for stdin, _ in cases]
  results = sandbox.run_many(reqs)
  passed, details = 0, []
  for (_, expected), res in zip(cases, results):
    good = (res.status == "ok" and _normalise(res.stdout, compare) ==
            _normalise(expected, compare))
    passed += good
    details.append("pass" if good else f"fail: status={res.status}")
  bad = [r.status for r in results if r.status != "ok"]
  return GradeResult(passed, len(cases), passed == len(cases),
                     bad[0] if bad else "ok", tuple(details), tuple(results))
