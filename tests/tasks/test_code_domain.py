"""Code domain: generated function problems graded by tamper-proof unit tests."""

import os
import time

import numpy as np
import pytest

from rl_post.tasks import registry
from rl_post.tasks.code import Code
from rl_post.tasks.sandboxed import SandboxRequiredError, extract_code
from tests.tasks.conftest import first_task

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def domain():
  return Code(timeout_s=TIMEOUT_S, memory_mb=128)


def _answer(code):
  return f"<think>x</think>\n<answer>\n```python\n{code}\n```\n</answer>"


def test_generator_is_deterministic_and_covers_every_level(domain):
  for level in domain.difficulty_levels:
    a = [domain.generate(np.random.default_rng(7), level) for _ in range(3)]
    b = [domain.generate(np.random.default_rng(7), level) for _ in range(3)]
    assert a == b and all(t.difficulty == level for t in a)
  first = [domain.generate(np.random.default_rng(s), 3).target for s in range(6)]
  assert len({repr(t) for t in first}) > 1  # the seed matters
  with pytest.raises(ValueError, match="difficulty must be one of"):
    domain.generate(np.random.default_rng(0), 0)
  assert registry.make_domain("code").name == "code"


def test_demonstrations_score_one_in_one_batch(domain, sb):
  rng = np.random.default_rng(0)
  tasks = [domain.generate(rng, level) for level in domain.difficulty_levels for _ in range(6)]
  verdicts = domain.verify_batch(tasks, [domain.demonstration(t) for t in tasks], sandbox=sb)
  assert [v.error for v in verdicts] == [None] * len(tasks)
  assert all(v.correct and v.format_ok and v.components["tests_passed"] == 1.0
             for v in verdicts)
  # a bare fence without the tags (chat models) is graded too, with format_ok False
  code = extract_code(domain.demonstration(tasks[0]))
  bare = domain.verify(tasks[0], f"Here:\n```python\n{code}\n```", sandbox=sb)
  assert bare.correct and not bare.format_ok


def test_partial_credit_is_the_fraction_of_tests_passed(domain, sb):
  task = first_task(domain, np.random.default_rng(1), 1,
                    lambda t: t.metadata["entry_point"] == "sum_divisible")
  expected = [e for _, e in task.target]
  verdict = domain.verify(task, _answer("def sum_divisible(xs, k):\n  return 0"), sandbox=sb)
  assert verdict.score == pytest.approx(expected.count(0) / len(expected))
  assert 0 < verdict.score < 1 and not verdict.correct


def test_typed_comparison_rejects_bool_for_int_and_tuple_for_list(domain, sb):
  task = first_task(domain, np.random.default_rng(2), 2,
                    lambda t: t.metadata["entry_point"] == "running_max")
  as_tuple = "def running_max(xs):\n  out = []\n  for x in xs:\n" \
             "    out.append(max(out[-1], x) if out else x)\n  return tuple(out)"
  assert domain.verify(task, _answer(as_tuple), sandbox=sb).score < 1


def test_a_hung_completion_fails_alone_and_is_labelled(domain, sb):
  task = domain.generate(np.random.default_rng(4), 3)
  demo = domain.demonstration(task)
  hung = _answer(f"def {task.metadata['entry_point']}(*a):\n  while True:\n    pass")
  verdicts = domain.verify_batch([task] * 3, [demo, hung, demo], sandbox=sb)
  assert [v.score for v in verdicts] == [1.0, 0.0, 1.0]
  assert verdicts[1].error.startswith("timeout: ")  # counted by the reward path


def test_sandbox_is_required(domain):
  task = domain.generate(np.random.default_rng(0), 1)
  with pytest.raises(SandboxRequiredError, match="needs the shared"):
    domain.verify(task, domain.demonstration(task))


def _hostile(entry, outside):
  always_equal = ("class E:\n  def __eq__(self, o): return True\n"
                  "  def __ne__(self, o): return False\n  __hash__ = object.__hash__\n")
  return {
      "sys.exit": "import sys\nsys.exit(0)",
      "os._exit": "import os\nos._exit(0)",
      "prints pass": "print('all tests passed')\nprint('PASSED')",
      "always equal": f"{always_equal}def {entry}(*a, **k):\n  return E()",
      "int subclass": f"class I(int):\n  def __eq__(self, o): return True\n"
                      f"def {entry}(*a, **k):\n  return I(0)",
      "patched builtins": "import builtins, json\nbuiltins.type = lambda *a: int\n"
                          "builtins.isinstance = lambda *a: True\n"
                          "json.dumps = lambda *a, **k: '{\"results\": []}'\n"
                          f"def {entry}(*a, **k):\n  return None",
      "write outside": f"open({outside!r}, 'w').write('x')\ndef {entry}(*a):\n  return 0",
      "infinite loop": f"def {entry}(*a):\n  while True:\n    pass",
      "fork bomb": "import os\nwhile True:\n  try:\n    os.fork()\n  except OSError:\n    pass",
      "memory bomb": "x = []\nwhile True:\n  x.append(bytearray(1 << 24))",
      "malformed": f"def {entry}(:\n  return",
      "no function": "x = 1",
  }


def test_wrong_malformed_truncated_and_hostile_answers_fail_promptly(domain, sb, tmp_path):
  task = domain.generate(np.random.default_rng(3), 2)
  entry = task.metadata["entry_point"]
  outside = str(tmp_path / "escaped.txt")
  hostile = _hostile(entry, outside)
  demo = domain.demonstration(task)
  extra = {"truncated": demo[:len(demo) // 2], "empty": "", "wrong": _answer(
      f"def {entry}(*a):\n  return None"), "nested tags": "<answer>" * 5000}
  answers = {name: _answer(code) for name, code in hostile.items()} | extra
  start = time.monotonic()
  verdicts = domain.verify_batch([task] * len(answers), list(answers.values()), sandbox=sb)
  elapsed = time.monotonic() - start
  scores = {name: v.score for name, v in zip(answers, verdicts)}
  assert all(s < 1 for s in scores.values()), scores
  assert all(s == 0 for n, s in scores.items() if n != "wrong"), scores
  assert not os.path.exists(outside)
  # three runs hit the time budget, two at a time: far below one timeout per answer
  assert elapsed < len(answers) * TIMEOUT_S, elapsed
  assert domain.verify(task, demo, sandbox=sb).correct  # the pool is still healthy
