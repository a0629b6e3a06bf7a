"""Process credit of the arithmetic and countdown verifiers: each written step checked."""

import numpy as np
import pytest

from rl_post.rewards import process_credit
from rl_post.tasks.arithmetic import MAX_EXTRA_STEPS, Arithmetic, column_credit
from rl_post.tasks.base import Task
from rl_post.tasks.countdown import Countdown, step_credit


def _sum_task(a, b, op="+"):
  return Task(f"arithmetic/2/{a}{op}{b}", "arithmetic", f"What is {a}{op}{b}?", 2,
              a + b if op == "+" else a - b, {"a": a, "b": b, "op": op})


@pytest.mark.parametrize("level", [1, 2, 3, 102, 103])
def test_every_arithmetic_demonstration_has_full_credit(level):
  domain = Arithmetic(max_difficulty=3, operations="+-", short_first=True)
  rng = np.random.default_rng(level)
  for _ in range(50):
    task = domain.generate(rng, level)
    verdict = domain.verify(task, domain.demonstration(task))
    assert verdict.correct and verdict.components["process"] == 1.0
    assert verdict.step_scores and all(s == 1.0 for _, _, s in verdict.step_scores)


def test_arithmetic_credits_each_column():
  domain = Arithmetic(max_difficulty=2, operations="+")
  task = _sum_task(85, 21)
  # a wrong fact in the tens column: the ones column keeps its credit
  text = "<think>5+1+0=6,0 8+2+0=9,0</think>\n<answer>96</answer>"
  verdict = domain.verify(task, text)
  assert verdict.score == 0.0
  assert [s for _, _, s in verdict.step_scores] == [1.0, 0.0]
  assert verdict.components["process"] == pytest.approx(1 / 3)  # 3 columns expected
  start, end, _ = verdict.step_scores[0]
  assert text[start:end] == "5+1+0=6,0"
  # digits of a sum in either order; a missing carry column, an extra step
  assert column_credit(85, 21, "+", "<think>1+5+0=6,0 2+8+0=0,1 0+0+1=1,0</think>")[0] == 1.0
  assert column_credit(85, 21, "+", "<think>5+1+0=6,0 8+2+0=0,1</think>")[0] == pytest.approx(2 / 3)
  extra = "<think>5+1+0=6,0 8+2+0=0,1 0+0+1=1,0 0+0+0=0,0</think>"
  assert column_credit(85, 21, "+", extra)[0] == pytest.approx(3 / 4)
  # the wrong operand's digit, or a carry that was not there
  assert column_credit(85, 21, "+", "<think>5+2+0=7,0</think>")[1][0][2] == 0.0
  assert column_credit(85, 21, "+", "<think>5+1+1=7,0</think>")[1][0][2] == 0.0


def test_arithmetic_subtraction_keeps_operand_order():
  assert column_credit(52, 17, "-", "<think>2-7-0=5,1 5-1-1=3,0</think>")[0] == 1.0
  assert column_credit(52, 17, "-", "<think>7-2-0=5,1 1-5-1=3,0</think>")[0] == 0.0


def test_arithmetic_credit_without_a_think_section_or_answer():
  domain = Arithmetic(max_difficulty=2, operations="+")
  task = _sum_task(85, 21)
  answer_only = domain.verify(task, "<think></think>\n<answer>106</answer>")
  assert answer_only.correct and answer_only.components["process"] == 0.0
  assert answer_only.step_scores == ()
  assert column_credit(85, 21, "+", "5+1+0=6,0 8+2+0=0,1")[0] == 0.0  # no <think>
  truncated = domain.verify(task, "<think>5+1+0=6,0 8+2+0=0,1 0+0+1=1,0</think>")
  assert truncated.error == "no <answer> tag" and truncated.components["process"] == 1.0


def test_arithmetic_credit_reads_boundedly_many_steps():
  steps = " ".join(["5+1+0=6,0"] * 10_000)
  score, spans = column_credit(85, 21, "+", f"<think>{steps}</think>")
  assert len(spans) == 3 + MAX_EXTRA_STEPS
  assert score == pytest.approx(1 / len(spans))


def test_countdown_demonstrations_have_full_credit():
  domain = Countdown()
  rng = np.random.default_rng(0)
  for level in (1, 2, 3):
    for _ in range(30):
      task = domain.generate(rng, level)
      verdict = domain.verify(task, domain.demonstration(task))
      assert verdict.correct and verdict.components["process"] == 1.0
      assert len(verdict.step_scores) == level + 1


def test_countdown_step_credit():
  assert step_credit([3, 5, 7], "<think>3+5=8, 8*7=56</think>")[0] == 1.0
  # wrong arithmetic, then an operand that is not available (8 was never made)
  assert [s for *_, s in step_credit([3, 5, 7], "<think>3+5=9, 8*7=56</think>")[1]] == [0, 0]
  # a number used twice
  assert [s for *_, s in step_credit([3, 5, 7], "<think>3+5=8, 3*7=21</think>")[1]] == [1, 0]
  assert step_credit([8, 2, 7], "<think>8/0=1, 8/2=4</think>")[0] == 0.5  # no division by 0
  assert step_credit([8, 3, 7], "<think>8/3=2</think>")[0] == 0.0  # inexact division
  assert step_credit([3, 5, 7], "<answer>3+5+7</answer>") == (0.0, ())
  # hostile: a 6000-digit operand is not a step; many steps are read boundedly
  assert step_credit([3, 5, 7], "<think>" + "1" * 6000 + "+2=3</think>") == (0.0, ())
  many = step_credit([3, 5, 7], "<think>" + ", ".join(["3+5=8"] * 5000) + "</think>")
  assert len(many[1]) == 2 + MAX_EXTRA_STEPS


def test_countdown_credit_on_every_verdict_path():
  domain = Countdown()
  task = domain.generate(np.random.default_rng(1), 1)
  work = f"<think>{', '.join(task.metadata['steps'])}</think>\n"
  for answer in ("<answer>1+</answer>", "<answer>1+2+3+4</answer>", ""):
    verdict = domain.verify(task, work + answer)
    assert verdict.score == 0.0 and verdict.components["process"] == 1.0


def test_step_scores_reach_the_response_tokens():
  """The verifier's spans land on the tokens that wrote the steps."""
  text = "<think>5+1+0=6,0 8+2+0=9,0</think>\n<answer>96</answer>"
  verdict = Arithmetic(max_difficulty=2, operations="+").verify(_sum_task(85, 21), text)
  ids = list(range(len(text)))  # one character per token
  ends_T = process_credit.token_char_ends(lambda i: text[:len(i)], ids)
  score_T, covered_T = process_credit.spans_to_tokens_T(verdict.step_scores, ends_T)
  first, second = (slice(s, e) for s, e, _ in verdict.step_scores)
  assert covered_T[first].all() and (score_T[first] == 1).all()
  assert covered_T[second].all() and (score_T[second] == 0).all()
  assert not covered_T[:7].any()
