"""countdown, math, extraction, retrieval: generators, verifiers, hostile answers."""

import json
import threading

import numpy as np
import pytest

from rl_post.tasks.base import Task
from rl_post.tasks.countdown import Countdown
from rl_post.tasks.extraction import Extraction, field_score
from rl_post.tasks.math import Math
from rl_post.tasks.retrieval import Retrieval, normalize


def _answer(text):
  return f"<think>w</think>\n<answer>{text}</answer>"


def _all_levels(domain, per_level):
  rng = np.random.default_rng(0)
  return [domain.generate(rng, d) for d in domain.difficulty_levels for _ in range(per_level)]


# ---- countdown

def _countdown_task(numbers, target):
  return Task("t", "countdown", "", 1, target, {"numbers": numbers, "solution": "", "steps": []})


def test_countdown_demonstrations_verify_and_use_all_numbers():
  domain = Countdown()
  for task in _all_levels(domain, 50):
    assert len(task.metadata["numbers"]) == task.difficulty + 2
    assert 10 <= task.target <= 1000
    verdict = domain.verify(task, domain.demonstration(task))
    assert verdict.correct and verdict.format_ok, (task, verdict)


@pytest.mark.parametrize("answer,score,error", [
    ("(25-5)*(3+1)/2", 1.0, None),
    ("(3+1)*(25-5)/2 = 40", 1.0, None),
    ("(25-5)*(3+1)", 0.0, "does not use each number exactly once"),
    ("(25-5)*(3+1)/2+0", 0.0, "does not use each number exactly once"),
    ("(25-5)*(3+1)/2/1", 0.0, "does not use each number exactly once"),
    ("(25+5)*(3+1)/2", 0.0, None),
    ("25*2**3", 0.0, "invalid expression: powers are not allowed (at 4)"),
    ("__import__('os')", 0.0, "invalid expression: character \"'\" at 11 is not allowed"),
    ("40.0", 0.0, "invalid expression: decimal number '40.0' at 0 is not allowed"),
])
def test_countdown_verifier(answer, score, error):
  verdict = Countdown().verify(_countdown_task([25, 5, 3, 1, 2], 40), _answer(answer))
  assert (verdict.score, verdict.error) == (score, error)


def test_countdown_hostile_answers_are_refused_by_a_limit_before_evaluation():
  task = _countdown_task([2, 3, 4], 24)
  too_long = "invalid expression: expression longer than 256 characters"
  for text, error in [("9**9**9**9", "invalid expression: powers are not allowed (at 1)"),
                      ("(" * 10_000 + "2", too_long), ("9" * 100_000, too_long),
                      ("<answer>" * 20_000, "invalid expression: empty expression"),
                      ("2*" * 50_000 + "2", too_long)]:
    verdict = Countdown().verify(task, _answer(text))
    assert (verdict.score, verdict.error) == (0.0, error)


# ---- math

@pytest.fixture(scope="module")
def math_domain():
  domain = Math(timeout_s=2.0)
  yield domain
  domain.checker.close()


def test_math_demonstrations_and_equivalent_forms(math_domain):
  for task in _all_levels(math_domain, 5):
    assert math_domain.verify(task, math_domain.demonstration(task)).correct
  frac = Task("t", "math", "", 1, "\\frac{3}{4}")
  for good in ["3/4", "\\frac{6}{8}", "0.75", "$\\frac34$", "\\boxed{\\frac{3}{4}}"]:
    assert math_domain.verify(frac, _answer(good)).correct, good
  for bad in ["4/3", "0.7", "", "x", "\\frac{3}{"]:
    assert math_domain.verify(frac, _answer(bad)).score == 0.0, bad
  roots = Task("t", "math", "", 3, "\\{-2, 3\\}")
  assert math_domain.verify(roots, _answer("\\{3, -2\\}")).correct
  assert not math_domain.verify(roots, _answer("\\{3\\}")).correct
  interval = Task("t", "math", "", 4, "(-1, 4]")
  assert math_domain.verify(interval, _answer("\\left(-1, 4\\right]")).correct
  assert not math_domain.verify(interval, _answer("(-1, 4)")).correct


def test_math_hostile_answer_times_out_alone_off_the_main_thread(math_domain):
  task = Task("t", "math", "", 1, "\\frac{3}{4}")
  results = {}

  def run():  # math-verify's signal.alarm timeout would raise here; ours works
    results["tower"] = math_domain.verify(task, _answer("9^{9^{9^{9}}}"))
    results["after"] = math_domain.verify(task, _answer("3/4"))

  thread = threading.Thread(target=run)
  thread.start()
  thread.join(60)
  assert results["tower"].score == 0.0 and results["tower"].error.startswith("timeout")
  assert results["after"].correct  # a fresh child took over
  assert math_domain.checker.timeouts >= 1


def test_math_refuses_long_and_missing_answers(math_domain):
  task = Task("t", "math", "", 1, "1")
  assert math_domain.verify(task, _answer("1" * 300)).error == "answer too long"
  assert math_domain.verify(task, "<answer>" * 50_000).error == "no <answer> tag"
  with pytest.raises(ValueError, match="timeout_s must be > 0"):
    Math(timeout_s=0)


# ---- extraction

def test_extraction_demonstrations_and_partial_credit():
  domain = Extraction()
  tasks = _all_levels(domain, 20)
  for task in tasks:
    assert domain.verify(task, domain.demonstration(task)).correct
  task = tasks[-1]  # level 4: six records, seven fields, corrections applied
  records = [dict(r) for r in task.target]
  records[0]["city"], records[1]["age"] = "Atlantis", str(records[1]["age"])  # one wrong field
  assert domain.verify(task, _answer(json.dumps(records))).score == pytest.approx(41 / 42)
  assert domain.verify(task, _answer(json.dumps(records[:3]))).score == pytest.approx(20 / 42)
  assert domain.verify(task, _answer(json.dumps(task.target * 2))).score == pytest.approx(0.5)
  fenced = "```json\n" + json.dumps(task.target) + "\n```"
  assert domain.verify(task, _answer(fenced)).correct
  assert all(domain.verify(task, _answer(json.dumps(r))).score == 0 for r in ([], {}, "x", 3))


def test_extraction_field_rules():
  fields = ["name", "age", "amount"]
  expected = {"name": "Ada Hale", "age": 30, "amount": 12.5}
  assert field_score(expected, {"name": " ada  HALE ", "age": "30", "amount": "$12.50"},
                     fields) == 1
  assert field_score(expected, {"name": "Ada", "age": True, "amount": 12.51}, fields) == 0


def test_extraction_hostile_answers_are_refused_with_a_reason():
  domain = Extraction()
  task = domain.generate(np.random.default_rng(0), 3)
  # Deep nesting and huge integers are parse errors (caught, scored 0); long text is
  # refused before it is parsed.
  for text, error in [("[" * 8000, "invalid JSON: RecursionError"),
                      ("1" * 8000, "invalid JSON: ValueError"),
                      ('{"a": ' * 1500, "answer too long"), ("x" * 1_000_000, "answer too long")]:
    verdict = domain.verify(task, _answer(text))
    assert (verdict.score, verdict.error) == (0.0, error)


# ---- retrieval

def test_retrieval_lengths_hops_and_answers():
  domain = Retrieval()
  rng = np.random.default_rng(0)
  for level, (tokens, hops) in zip(domain.difficulty_levels, domain.levels):
    task = domain.generate(rng, level)
    assert abs(len(task.prompt) / 4 - tokens) < 0.02 * tokens + 40
    assert len(task.metadata["facts"]) == hops
    assert all(fact in task.prompt for fact in task.metadata["facts"])
    assert domain.verify(task, domain.demonstration(task)).correct
    kind = task.metadata["kind"]
    assert domain.verify(task, _answer(f"The {kind} {task.target}.")).correct
    assert domain.verify(task, _answer("Nowhere")).score == 0.0
  assert normalize("In the Room VEGA!", "room") == "vega"


def test_retrieval_distractor_chains_lead_elsewhere():
  task = Retrieval(levels=[(1024, 2)], distractors=4).generate(np.random.default_rng(3), 1)
  assert task.prompt.count("'s key is in locker") == 5
  assert task.prompt.count(" is in room ") == 5


def test_retrieval_bad_options():
  with pytest.raises(ValueError, match="hops <= 4"):
    Retrieval(levels=[(1024, 5)])
  with pytest.raises(ValueError, match="128 <= context_tokens"):
    Retrieval(levels=[(10, 1)])
  with pytest.raises(ValueError, match="distractors must be in"):
    Retrieval(distractors=20)
