"""HumanEval domain: all canonical solutions pass, fakes do not."""

import math
import time

import numpy as np
import pytest

from rl_post.sandbox import RunRequest
from rl_post.tasks import registry
from rl_post.tasks.humaneval import HumanEval, _poly_root_predicate, to_source

ALWAYS_EQUAL = """
class AE:
  def __eq__(s, o): return True
  def __ne__(s, o): return False
  def __bool__(s): return True
  def __lt__(s, o): return True
  def __le__(s, o): return True
  def __gt__(s, o): return True
  def __ge__(s, o): return True
  def __abs__(s): return 0
  def __sub__(s, o): return s
  def __rsub__(s, o): return s
  def __iter__(s): return iter(())
  def __len__(s): return 0
  def __float__(s): return 0.0
  __hash__ = object.__hash__
"""


@pytest.fixture(scope="module")
def domain():
  return HumanEval(timeout_s=3.0, memory_mb=256)


def _answer(code):
  return f"<think>h</think>\n<answer>\n```python\n{code}\n```\n</answer>"


def test_problems_levels_and_determinism(domain):
  tasks = domain.tasks()
  assert len(tasks) == 164 and len({t.task_id for t in tasks}) == 164
  assert {t.difficulty for t in tasks} == {1, 2, 3}
  for level in domain.difficulty_levels:
    a = [domain.generate(np.random.default_rng(3), level) for _ in range(4)]
    assert a == [domain.generate(np.random.default_rng(3), level) for _ in range(4)]
    assert all(t.difficulty == level for t in a)
  assert registry.make_domain("humaneval").name == "humaneval"


def test_all_canonical_solutions_pass_in_one_batch(domain, sb):
  tasks = domain.tasks()
  verdicts = domain.verify_batch(tasks, [domain.demonstration(t) for t in tasks], sandbox=sb)
  failed = [(t.task_id, v.error) for t, v in zip(tasks, verdicts) if not v.correct]
  assert failed == []
  assert all(len(domain.cases(t.task_id)) >= 1 for t in tasks)
  assert sum(len(domain.cases(t.task_id)) for t in tasks) > 1000  # loops were recorded too


def test_always_equal_objects_fake_the_original_checks_but_not_ours(domain, sb):
  tasks = domain.tasks()
  programs = {t.task_id: f"{ALWAYS_EQUAL}\ndef {t.metadata['entry_point']}(*a, **k):\n"
                         "  return AE()" for t in tasks}
  original = sb.run_many([RunRequest(f"{domain.problems[k]['prompt']}\n{code}\n"
                                     f"{domain.problems[k]['test']}\n"
                                     f"check({domain.problems[k]['entry_point']})\n",
                                     timeout_s=5.0) for k, code in programs.items()])
  fooled = sum(r.status == "ok" for r in original)
  assert fooled > 100  # the attack is real: HumanEval's own check() passes it
  verdicts = domain.verify_batch(tasks, [_answer(c) for c in programs.values()], sandbox=sb)
  assert [v.score for v in verdicts] == [0.0] * len(tasks)


def test_hostile_wrong_and_truncated_answers_fail_promptly(domain, sb):
  tasks = [domain.task(f"HumanEval/{i}") for i in (0, 2, 12, 53)]
  entry = [t.metadata["entry_point"] for t in tasks]
  answers = {
      "sys.exit": ["import sys\nsys.exit(0)"] * 4,
      "os._exit": ["import os\nos._exit(0)"] * 4,
      "prints": ["print('all tests passed')"] * 4,
      "loop": [f"def {e}(*a):\n  while True:\n    pass" for e in entry],
      "wrong": [f"def {e}(*a):\n  return None" for e in entry],
      "bool for int": ["def add(x, y):\n  return bool(x + y)"] * 4,
  }
  batch_tasks, batch = [], []
  for name, codes in answers.items():
    batch_tasks += tasks
    batch += [_answer(c) for c in codes]
  for t in tasks:
    demo = domain.demonstration(t)
    batch_tasks.append(t)
    batch.append(demo[:len(demo) // 2])
  start = time.monotonic()
  verdicts = domain.verify_batch(batch_tasks, batch, sandbox=sb)
  assert time.monotonic() - start < 30
  assert all(v.score < 1 for v in verdicts), [(t.task_id, v.score) for t, v in
                                              zip(batch_tasks, verdicts) if v.score >= 1]


def test_find_zero_accepts_any_root_and_sources_round_trip():
  is_root = _poly_root_predicate([-6, 11, -6, 1])  # (x-1)(x-2)(x-3)
  assert is_root(1.0) and is_root(2) and is_root(3.0000000001)
  assert not is_root(2.5) and not is_root("2") and not is_root(True)
  assert not is_root(float("nan")) and not is_root(1e308)
  for value in ([1, (2,), {"a": {3}}], frozenset({1.5}), (), [float("inf"), -0.0], b"\x00",
                {(1, 2): None}):
    rebuilt = eval(to_source(value))  # our own source of a trusted value
    assert rebuilt == value and type(rebuilt) is type(value)
  assert math.isnan(eval(to_source(float("nan"))))


def test_a_failed_recording_fails_its_task_alone(sb):
  domain = HumanEval(timeout_s=3.0, memory_mb=256)
  domain.problems["HumanEval/0"]["canonical_solution"] = "    raise RuntimeError('broken')\n"
  tasks = [domain.task("HumanEval/0"), domain.task("HumanEval/2")]
  v0, v2 = domain.verify_batch(tasks, [domain.demonstration(t) for t in tasks], sandbox=sb)
  assert v0.score == 0 and "recording the canonical solution failed" in v0.error
  assert v2.correct
