"""Every registered domain: deterministic generator, a demonstration that scores 1
(also after our tokenizer's round trip), and wrong, malformed, truncated and
hostile answers that score < 1 and return promptly. One task per domain at its
easiest level keeps the whole file near a minute."""

import functools
import pickle
import time

import numpy as np
import pytest

from rl_post.data import chat_template
from rl_post.tasks import registry

DOMAINS = registry.available()
HOSTILE = ("<answer>" * 20_000, "<answer>" + "9" * 200_000 + "</answer>",
           "<answer>" + "(" * 50_000 + "</answer>", "<answer>9**9**9**9**9</answer>",
           "<answer>" + "[" * 10_000 + "</answer>",
           "<answer>__import__('os').system('true')</answer>")
PROMPT_SECONDS = 10.0  # generous: math-verify's own child may be starting; CI is shared


@functools.lru_cache(maxsize=None)
def _domain_and_task(name):
  domain = registry.make_domain(name)
  return domain, domain.generate(np.random.default_rng(0), min(domain.difficulty_levels))


def test_at_least_the_text_domains_and_the_reasoning_gym_adapter_are_registered():
  assert {"arithmetic", "countdown", "math", "extraction", "retrieval"} <= set(DOMAINS)
  assert len(DOMAINS) >= 107


@pytest.mark.parametrize("name", DOMAINS)
def test_generator_is_deterministic_and_levels_are_exposed(name):
  domain, task = _domain_and_task(name)
  assert domain.name == name and task.domain == name
  assert domain.difficulty_levels and list(domain.difficulty_levels) == sorted(
      set(domain.difficulty_levels))
  again = domain.generate(np.random.default_rng(0), min(domain.difficulty_levels))
  assert (again.task_id, again.prompt, repr(again.target)) == (
      task.task_id, task.prompt, repr(task.target))
  assert pickle.loads(pickle.dumps(task)).task_id == task.task_id  # crosses to reward workers
  with pytest.raises(ValueError, match="difficulty must be one of"):
    domain.generate(np.random.default_rng(0), max(domain.difficulty_levels) + 1)


@pytest.mark.parametrize("name", DOMAINS)
def test_demonstration_scores_one_also_through_our_tokenizer(name, tokenizer):
  domain, task = _domain_and_task(name)
  demo = domain.demonstration(task)
  verdict = domain.verify(task, demo)
  assert verdict.correct and verdict.format_ok, verdict
  decoded = tokenizer.decode(tokenizer.encode(demo))
  assert domain.verify(task, decoded).correct, decoded[-300:]
  for template in (chat_template.PLAIN, chat_template.CHATML):
    rendered = chat_template.render(template, [{"role": "user", "content": task.prompt}])
    assert task.prompt in rendered
  prompt_ids = tokenizer.encode(task.prompt)
  assert " ".join(tokenizer.decode(prompt_ids).split()) == " ".join(task.prompt.split())


@pytest.mark.parametrize("name", DOMAINS)
def test_wrong_malformed_truncated_and_hostile_answers_score_below_one(name):
  domain, task = _domain_and_task(name)
  demo = domain.demonstration(task)
  answers = {"wrong": "<think>w</think>\n<answer>qwerty zxcv</answer>",
             "empty": "<think>w</think>\n<answer></answer>",
             "no tags": demo.replace("<answer>", "").replace("</answer>", ""),
             "truncated": demo[:max(1, len(demo) - len("</answer>") - 1)]}
  answers.update({f"hostile {i}": text for i, text in enumerate(HOSTILE)})
  for kind, text in answers.items():
    start = time.perf_counter()
    verdict = domain.verify(task, text)
    elapsed = time.perf_counter() - start
    assert verdict.score < 1, (kind, verdict)
    assert elapsed < PROMPT_SECONDS, (kind, elapsed)
