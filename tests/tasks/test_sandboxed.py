"""SandboxedDomain plumbing: code extraction, batching, typed grading, prompts."""

import json
import time

import numpy as np
import pytest

from rl_post.data import chat_template
from rl_post.sandbox import ExecResult, grading
from rl_post.tasks.code import Code
from rl_post.tasks.humaneval import HumanEval
from rl_post.tasks.sandboxed import SandboxRequiredError, _run_all, extract_code
from rl_post.tasks.shell import Shell
from rl_post.tasks.sql import Sql


def test_extract_code():
  assert extract_code("<think>t</think><answer>```python\nx = 1\n```</answer>") == "x = 1"
  assert extract_code("Sure:\n```sql\nSELECT 1\n```\nDone.") == "SELECT 1"
  assert extract_code("```\nls\n```") == "ls"
  assert extract_code("<answer>SELECT 2</answer>") == "SELECT 2"
  assert extract_code("```a```\n```python\nlast\n```") == "last"
  assert extract_code("<answer>```python\ntruncated") is None
  assert extract_code("```python\nx = 1") is None
  assert extract_code("no code at all") is None
  start = time.monotonic()
  assert extract_code("<answer>```" * 200_000) == "<answer>"  # linear time on hostile input
  assert extract_code("```" * 300_001) == ""
  assert time.monotonic() - start < 1.0


def _score(cases, values):
  """Host-side grading of `values` as if a run had returned them."""
  prepared = grading.prepare_python_tests("x = 1", cases)
  record = json.dumps({"nonce": prepared.nonce, "results": [[True, v] for v in values]})
  result = ExecResult("ok", 0, "", "", 0.01,
                      files={".rl_post_result_" + prepared.nonce: record.encode()})
  return grading.score_python_tests(prepared, result).details


def test_typed_and_predicate_cases_check_types_on_the_host():
  typed = lambda e: grading.FunctionCase("candidate()", e, kind="typed", tolerance=1e-6)
  cases = [typed(1), typed(True), typed([1, 2]), typed(0.5), typed({"a": [1.0]}), typed(2.0),
           grading.FunctionCase("candidate()", kind="predicate", predicate=lambda v: v == 3)]
  values = [True, 1, {"T": [1, 2]}, 0.5000001, {"D": [["a", {"L": [1]}]]}, 2, 3]
  assert [d == "pass" for d in _score(cases, values)] == [
      False, False, False, True, True, True, True]
  with pytest.raises(ValueError, match="predicate is required"):
    grading.FunctionCase("f()", kind="predicate")


class _PickySandbox:
  """run_many rejects any batch containing the request for 'bad'."""

  def run_many(self, requests):
    if any(b"bad" in r.files.get("solution.py", b"") for r in requests):
      raise ValueError("files: rejected")
    return [ExecResult("ok", 0, "", "", 0.0) for _ in requests]


def test_a_rejected_request_fails_alone():
  reqs = [grading.prepare_python_tests(p, "assert f() == 1").request
          for p in ("good", "bad", "good")]
  out = _run_all(_PickySandbox(), reqs)
  assert isinstance(out[0], ExecResult) and isinstance(out[2], ExecResult)
  assert out[1].startswith("sandbox rejected the run: files: rejected")


def test_errors_without_a_sandbox_and_on_mismatched_batches():
  domain = Sql()
  task = domain.generate(np.random.default_rng(0), 1)
  with pytest.raises(SandboxRequiredError, match="'sql' executes model output"):
    domain.verify_batch([task], ["x"])
  with pytest.raises(ValueError, match="1 tasks but 2 completions"):
    domain.verify_batch([task], ["x", "y"], sandbox=_PickySandbox())
  other = Code().generate(np.random.default_rng(0), 1)
  verdict = domain.verify_batch([other], ["x"], sandbox=_PickySandbox())[0]
  assert verdict.score == 0 and "belongs to domain 'code'" in verdict.error


@pytest.mark.parametrize("make", [Code, Sql, Shell, HumanEval])
def test_prompts_survive_our_tokenizer_and_chat_templates(make, tokenizer):
  domain = make()
  task = domain.generate(np.random.default_rng(0), domain.difficulty_levels[-1])
  demo = domain.demonstration(task)
  for text in (task.prompt, demo):
    assert tokenizer.decode(tokenizer.encode(text)) == text
  for template in (chat_template.CHATML, chat_template.PLAIN):
    rendered = chat_template.render(template, [{"role": "user", "content": task.prompt}])
    assert task.prompt in rendered
  assert "<answer>" in task.prompt and "<think>" in task.prompt
  assert extract_code(demo) and extract_code(demo) in demo


@pytest.mark.parametrize("make", [Code, Sql, Shell, HumanEval])
def test_tasks_survive_the_eval_set_records(make):
  from rl_post.data import eval_sets  # pylint: disable=import-outside-toplevel
  domain = make()
  tasks = [domain.generate(np.random.default_rng(0), level) for level in domain.difficulty_levels]
  assert [eval_sets.decode_record(eval_sets.encode_task(t)) for t in tasks] == tasks
