"""SQL domain: generated databases, gold result sets, read-only sandboxed queries."""

import time

import numpy as np
import pytest

from rl_post.tasks import registry
from rl_post.tasks.sql import Sql, rows_match
from tests.tasks.conftest import first_task

TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def domain():
  return Sql(timeout_s=TIMEOUT_S, memory_mb=128)


def _answer(query):
  return f"<think>q</think>\n<answer>\n```sql\n{query}\n```\n</answer>"


def test_generator_is_deterministic(domain):
  for level in domain.difficulty_levels:
    a = [domain.generate(np.random.default_rng(5), level) for _ in range(3)]
    b = [domain.generate(np.random.default_rng(5), level) for _ in range(3)]
    assert a == b and all(t.difficulty == level for t in a)
  assert registry.make_domain("sql").name == "sql"


def test_demonstrations_score_one(domain, sb):
  rng = np.random.default_rng(0)
  tasks = [domain.generate(rng, level) for level in domain.difficulty_levels for _ in range(8)]
  verdicts = domain.verify_batch(tasks, [domain.demonstration(t) for t in tasks], sandbox=sb)
  assert [v.error for v in verdicts] == [None] * len(tasks)
  assert all(v.correct and v.format_ok for v in verdicts)


def test_row_order_matters_only_when_the_question_orders(domain, sb):
  rng = np.random.default_rng(1)
  unordered = first_task(domain, rng, 1, lambda t: "live in" in t.prompt)
  ordered = first_task(domain, rng, 2, lambda t: "highest-paid" in t.prompt)
  shuffled = unordered.metadata["gold_query"] + " ORDER BY name DESC"
  reversed_ = ordered.metadata["gold_query"].replace("DESC", "ASC")
  v1, v2 = domain.verify_batch([unordered, ordered],
                               [_answer(shuffled), _answer(reversed_)], sandbox=sb)
  assert v1.correct and v2.score == 0
  assert rows_match([[1, "a"], [2.0, "b"]], [[2, "b"], [1, "a"]], ordered=False)
  assert not rows_match([[1, "a"], [2, "b"]], [[2, "b"], [1, "a"]], ordered=True)
  assert not rows_match([[1, "a"]], [[1, "a"], [1, "a"]], ordered=False)  # multisets
  assert not rows_match([["1"]], [[1]], ordered=False)  # text is not a number


def test_wrong_malformed_and_hostile_queries_fail_promptly(domain, sb):
  task = domain.generate(np.random.default_rng(2), 3)
  bomb = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
  queries = {
      "attach": "ATTACH DATABASE 'other.db' AS other",
      "attach in select": "SELECT * FROM employees; ATTACH DATABASE ':memory:' AS m",
      "load_extension": "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libm.so.6')",
      "recursive count bomb": f"{bomb} SELECT count(*) FROM c",
      "recursive rows bomb": f"{bomb} SELECT x FROM c",
      "string doubling": "WITH RECURSIVE s(x, n) AS (SELECT 'ab', 0 UNION ALL "
                         "SELECT x || x, n + 1 FROM s WHERE n < 40) SELECT max(length(x)) FROM s",
      "pragma": "PRAGMA table_info(employees)",
      "write": "DELETE FROM employees",
      "two statements": "SELECT 1; SELECT 2",
      "malformed": "SELEC name FRM employees",
      "wrong": "SELECT name FROM departments",
  }
  answers = [_answer(q) for q in queries.values()]
  demo = domain.demonstration(task)
  answers += [demo[:len(demo) // 2], "", "<answer>" * 5000 + "```sql"]
  start = time.monotonic()
  verdicts = domain.verify_batch([task] * len(answers), answers, sandbox=sb)
  assert time.monotonic() - start < len(answers) * TIMEOUT_S
  assert [v.score for v in verdicts] == [0.0] * len(answers), [v.error for v in verdicts]
  assert domain.verify(task, demo, sandbox=sb).correct  # the database copy was not changed
