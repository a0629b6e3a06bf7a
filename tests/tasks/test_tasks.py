"""Arithmetic domain: generator, demonstrations, extractor, verifier."""

import numpy as np
import pytest

from rl_post.tasks import registry
from rl_post.tasks.arithmetic import SHORT_FIRST, Arithmetic, column_steps
from rl_post.tasks.base import extract_answer


@pytest.fixture
def domain():
  return Arithmetic(max_difficulty=5)


def test_generator_respects_difficulty_and_demonstrations_verify(domain):
  rng = np.random.default_rng(0)
  for difficulty in domain.difficulty_levels:
    for _ in range(200):
      task = domain.generate(rng, difficulty)
      a, b, op = task.metadata["a"], task.metadata["b"], task.metadata["op"]
      assert len(str(a)) == difficulty and len(str(b)) <= difficulty
      assert task.target == (a + b if op == "+" else a - b) and task.target >= 0
      verdict = domain.verify(task, domain.demonstration(task))
      assert verdict.correct and verdict.format_ok and verdict.error is None


def test_column_steps_hand_written():
  assert column_steps(472, 389, "+") == (["2+9+0=1,1", "7+8+1=6,1", "4+3+1=8,0"], 861)
  # shorter operand first: the columns run over the longer one, the shorter zero-padded
  assert column_steps(7, 95, "+") == (["7+5+0=2,1", "0+9+1=0,1", "0+0+1=1,0"], 102)
  assert column_steps(95, 7, "+") == (["5+7+0=2,1", "9+0+1=0,1", "0+0+1=1,0"], 102)
  assert column_steps(302, 17, "-") == (["2-7-0=5,1", "0-1-1=8,1", "3-0-1=2,0"], 285)
  # a careless teacher drops the carry into column 1: 472+389 -> 851
  assert column_steps(472, 389, "+", frozenset({1})) == (
      ["2+9+0=1,1", "7+8+0=5,1", "4+3+1=8,0"], 851)
  # dropping the borrow into column 1 of 302-17 gives 295
  assert column_steps(302, 17, "-", frozenset({1})) == (
      ["2-7-0=5,1", "0-1-0=9,1", "3-0-1=2,0"], 295)


def test_noisy_teacher_is_deterministic_and_wrong_at_the_set_rate():
  noisy = Arithmetic(max_difficulty=4, demo_slip_rate=0.3)
  rng = np.random.default_rng(1)
  tasks = [noisy.generate(rng, 4) for _ in range(400)]
  demos = [noisy.demonstration(t) for t in tasks]
  assert demos == [noisy.demonstration(t) for t in tasks]
  wrong = np.mean([not noisy.verify(t, d).correct for t, d in zip(tasks, demos)])
  assert 0.2 < wrong < 0.7  # slips only matter where a carry/borrow exists
  assert all(noisy.verify(t, d).format_ok for t, d in zip(tasks, demos))
  with pytest.raises(ValueError, match="demo_slip_rate must be in"):
    Arithmetic(demo_slip_rate=1.5)


def test_answer_only_demonstrations_are_exact_at_the_set_rate():
  mixed = Arithmetic(max_difficulty=2, answer_only_rate=0.4)
  worked = Arithmetic(max_difficulty=2)
  rng = np.random.default_rng(2)
  tasks = [mixed.generate(rng, 2) for _ in range(500)]
  demos = [mixed.demonstration(t) for t in tasks]
  assert demos == [mixed.demonstration(t) for t in tasks]  # deterministic per task
  answer_only = [d.startswith("<think></think>") for d in demos]
  assert 0.33 < np.mean(answer_only) < 0.47
  for task, demo, short in zip(tasks, demos, answer_only):
    verdict = mixed.verify(task, demo)
    assert verdict.correct and verdict.format_ok
    if short:
      assert demo == f"<think></think>\n<answer>{task.target}</answer>"
    else:
      assert demo == worked.demonstration(task)
  with pytest.raises(ValueError, match="answer_only_rate must be in"):
    Arithmetic(answer_only_rate=-0.1)


def test_extract_answer_takes_last():
  assert extract_answer("<answer>1</answer> x <answer> 22 </answer>") == "22"
  assert extract_answer("no tags") is None
  assert extract_answer("<answer>unterminated") is None


@pytest.mark.parametrize("completion,correct,format_ok,error", [
    ("<think>x</think>\n<answer>861</answer>", True, True, None),
    ("<answer>861</answer>", True, False, None),                       # right, no reasoning
    ("<think>x</think>\n<answer>862</answer>", False, True, None),     # wrong
    ("<think>x</think>\n<answer>8 61</answer>", False, True, "answer is not an integer"),
    ("<think>x</think> 861", False, False, "no <answer> tag"),
    ("<answer>" + "9" * 300 + "</answer>", False, False, "answer too long"),
    ("<think></think><answer>861</answer><answer>1</answer>", False, False, None),
    ("\x00<answer>861\x00</answer>", False, False, "answer is not an integer"),
])
def test_verifier_right_wrong_malformed(domain, completion, correct, format_ok, error):
  task = domain.generate(np.random.default_rng(0), 3)
  task = type(task)(task_id="t", domain="arithmetic", prompt="What is 472+389?", difficulty=3,
                    target=861, metadata={"a": 472, "b": 389, "op": "+"})
  verdict = domain.verify(task, completion)
  assert (verdict.correct, verdict.format_ok, verdict.error) == (correct, format_ok, error)


def test_short_first_levels_write_the_shorter_operand_first():
  domain = Arithmetic(max_difficulty=3, operations="+", short_first=True)
  assert domain.difficulty_levels == (1, 2, 3, SHORT_FIRST + 2, SHORT_FIRST + 3)
  rng = np.random.default_rng(0)
  for digits in (2, 3):
    short_lens = set()
    for _ in range(200):
      task = domain.generate(rng, SHORT_FIRST + digits)
      first, second = task.metadata["a"], task.metadata["b"]
      assert task.prompt == f"What is {first}+{second}?" and task.target == first + second
      assert len(str(second)) == digits and len(str(first)) < digits
      short_lens.add(len(str(first)))
      verdict = domain.verify(task, domain.demonstration(task))
      assert verdict.correct and verdict.format_ok
    assert short_lens == set(range(1, digits))
  task = domain.generate(rng, SHORT_FIRST + 2)
  swapped = f"<think>x</think>\n<answer>{task.target + 1}</answer>"
  assert not domain.verify(task, swapped).correct
  with pytest.raises(ValueError, match="short_first levels are sums"):
    Arithmetic(operations="-", short_first=True)
  with pytest.raises(ValueError, match="short_first needs max_difficulty >= 2"):
    Arithmetic(max_difficulty=1, short_first=True)
  with pytest.raises(ValueError, match="difficulty must be one of"):
    Arithmetic(max_difficulty=2).generate(rng, SHORT_FIRST + 2)


def test_bad_domain_options_and_names():
  with pytest.raises(ValueError, match="max_difficulty must be in"):
    Arithmetic(max_difficulty=0)
  with pytest.raises(ValueError, match="operations must be a non-empty subset"):
    Arithmetic(operations="*")
  with pytest.raises(ValueError, match="unknown domain 'algebra'"):
    registry.make_domain("algebra")
  with pytest.raises(ValueError, match="difficulty must be one of"):
    Arithmetic(max_difficulty=2).generate(np.random.default_rng(0), 3)


def test_mixture_heldout_is_unique_and_never_trained_on():
  from rl_post.data.mixture import TaskConfig, TaskMixture
  config = TaskConfig(difficulties=(1, 2), heldout_size=60,
                      domain_options={"arithmetic": {"operations": "+"}})
  mixture = TaskMixture(config, seed=3)
  ids = [t.task_id for t in mixture.heldout]
  assert len(set(ids)) == 60
  train = [t for step in range(20) for t in mixture.sample(step, 32)]
  assert not set(ids) & {t.task_id for t in train}
  counts = np.bincount([t.difficulty for t in train])[1:]
  assert abs(counts[0] - counts[1]) < 0.2 * len(train)  # the mix stays as configured
  assert [t.task_id for t in mixture.sample(5, 8)] == [t.task_id for t in mixture.sample(5, 8)]
  with pytest.raises(ValueError, match="too few distinct tasks"):
    TaskMixture(TaskConfig(difficulties=(1,), heldout_size=150,
                           domain_options={"arithmetic": {"operations": "+"}}), seed=0)
