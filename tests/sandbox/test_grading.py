"""Grading attacks: every way to fake a pass must fail (issue 3)."""

import pytest

from rl_post.sandbox import grading

TESTS = """
def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(-4, 4) == 0
    assert candidate(10, 5) == 15
"""
GOOD = "def add(a, b):\n    return a + b\n"


def grade(sb, program, tests=TESTS, **kw):
  return grading.grade_python_tests(sb, program, tests, entry_point="add",
                                    timeout_s=kw.pop("timeout_s", 5), **kw)


def test_correct_program_passes(sb):
  g = grade(sb, GOOD)
  assert (g.passed, g.total, g.all_passed, g.status) == (3, 3, True, "ok")


def test_wrong_program_fails_per_case(sb):
  g = grade(sb, "def add(a, b):\n    return 3\n")
  assert (g.passed, g.total, g.all_passed) == (1, 3, False)


@pytest.mark.parametrize("name, program", [
    ("os_exit_0", "import os\nos._exit(0)\n" + GOOD),
    ("system_exit_0", "raise SystemExit(0)\n" + GOOD),
    ("exit_in_call", "import os\ndef add(a, b):\n    os._exit(0)\n"),
    ("system_exit_in_call", "def add(a, b):\n    raise SystemExit(0)\n"),
    ("closed_stdout", "import os, sys\nos.close(1)\nsys.stdout.close()\n"
     "def add(a, b):\n    return None\n"),
    ("prints_passed", "print('PASSED\\nOK\\nall tests passed')\n"
     "def add(a, b):\n    print('PASSED')\n    return 0\n"),
    ("eq_always_true",
     "class Yes:\n    def __eq__(self, other): return True\n"
     "    def __ne__(self, other): return False\n"
     "def add(a, b):\n    return Yes()\n"),
    ("int_subclass_eq",
     "class I(int):\n    def __eq__(self, other): return True\n"
     "def add(a, b):\n    return I(0)\n"),
    ("frame_walk",
     "import sys\n"
     "def add(a, b):\n"
     "    f = sys._getframe(1)\n"
     "    while f is not None:\n"
     "        for k, v in list(f.f_locals.items()):\n"
     "            if isinstance(v, list):\n"
     "                v[:] = [[True, 3]] * 3\n"
     "        f = f.f_back\n"
     "    return 0\n"),
    ("patched_builtins",
     "import builtins, json\n"
     "builtins.eval = lambda *a, **k: 3\n"
     "json.dumps = lambda *a, **k: '{\"nonce\": \"x\", \"results\": []}'\n"
     "builtins.type = lambda x: int\n" + "def add(a, b):\n    return 0\n"),
    ("forged_record",
     "import glob, json, os, sys\n"
     "def add(a, b):\n"
     "    nonce = sys._getframe(1).f_locals.get('nonce', '')\n"
     "    fd = os.open('.rl_post_result_' + nonce,\n"
     "                 os.O_WRONLY | os.O_CREAT, 0o600)\n"
     "    os.write(fd, json.dumps({'nonce': nonce, 'results':\n"
     "             [[True, 1]] * 3}).encode())\n"
     "    os._exit(0)\n"),
    ("nul_truncates_source", GOOD.replace("return a + b",
                                          "return 0\x00 + a + b")),
    ("kills_driver", "import os, signal\n"
     "def add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n"),
    ("missing_entry_point", "def plus(a, b):\n    return a + b\n"),
])
def test_grading_attack_fails(sb, check, name, program):
  g = grade(sb, program)
  assert not g.all_passed, (name, g)
  assert g.passed < g.total, (name, g)
  check.healthy(sb)  # and no process of the run is left


def test_nul_byte_program_fails_entirely(sb):
  g = grade(sb, GOOD + "\x00" + "garbage that would be a syntax error ((")
  assert g.passed == 0 and not g.all_passed


def test_tests_that_fail_to_collect_are_errors():
  with pytest.raises(ValueError, match="no assertions"):
    grading.parse_assert_tests("def check(candidate):\n    pass\n")
  with pytest.raises(ValueError, match="nested"):
    grading.parse_assert_tests(
        "def check(candidate):\n    for i in range(3):\n"
        "        assert candidate(i, 0) == i\n")
  with pytest.raises(ValueError, match="unsupported assertion"):
    grading.parse_assert_tests("assert candidate(1) == candidate(2)\n")
  with pytest.raises(ValueError, match="not valid Python"):
    grading.parse_assert_tests("assert (\n")


def test_assert_forms_and_tolerance(sb):
  tests = ("def check(candidate):\n"
           "    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9\n"
           "    assert candidate(True, False) is True\n"
           "    assert candidate([1], [2]) == [1, 2]\n"
           "    assert candidate((1,), (2,)) == (1, 2)\n"
           "    assert not candidate(0, 0)\n"
           "    assert candidate(1, 0)\n")
  g = grade(sb, "def add(a, b):\n    return a + b if type(a) is not bool "
            "else (a or b)\n", tests)
  assert (g.passed, g.total, g.all_passed) == (6, 6, True), g.details
  g = grade(sb, "def add(a, b):\n    return 1\n", tests)
  assert not g.all_passed


def test_function_cases_keep_types(sb):
  cases = [grading.FunctionCase("candidate((1,), (2,))", (1, 2)),
           grading.FunctionCase("candidate({1}, {2})", {1, 2}),
           grading.FunctionCase("candidate(b'a', b'b')", b"ab")]
  prog = ("def add(a, b):\n    return a | b if isinstance(a, set) "
          "else a + b\n")
  g = grading.grade_python_tests(sb, prog, cases, entry_point="add")
  assert g.all_passed, g.details
  # a list is not a tuple: the decoded type is checked
  g = grading.grade_python_tests(
      sb, "def add(a, b):\n    return list(a) + list(b)\n", cases[:1],
      entry_point="add")
  assert not g.all_passed


def test_grading_timeout_is_a_failure(sb):
  g = grade(sb, "def add(a, b):\n    while True:\n        pass\n",
            timeout_s=1)
  assert g.status == "timeout" and g.passed == 0


def test_grade_stdio(sb, check):
  prog = "a, b = map(int, input().split())\nprint(a + b)\n"
  cases = [("1 2\n", "3\n"), ("5 5", "10")]
  g = grading.grade_stdio(sb, prog, cases)
  assert (g.passed, g.total, g.all_passed) == (2, 2, True)
  g = grading.grade_stdio(sb, "print('PASSED')\nimport os\nos._exit(0)\n",
                          cases)
  assert g.passed == 0
  g = grading.grade_stdio(sb, "import os\nos.close(1)\n", cases)
  assert g.passed == 0
  with pytest.raises(ValueError, match="compare"):
    grading.grade_stdio(sb, prog, cases, compare="fuzzy")
  with pytest.raises(ValueError, match=r"cases\[0\]"):
    grading.grade_stdio(sb, prog, [("1 2", 3)])
  check.healthy(sb)


def test_bad_grading_inputs(sb):
  with pytest.raises(ValueError, match="program"):
    grading.grade_python_tests(sb, 5, TESTS)
  with pytest.raises(ValueError, match="entry_point"):
    grading.grade_python_tests(sb, GOOD, TESTS, entry_point="not valid")
  with pytest.raises(ValueError, match="FunctionCase.kind"):
    grading.FunctionCase("x", kind="close")
