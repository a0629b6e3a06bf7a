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
from rl_post.tasks import answers, registry
from rl_post.tasks.sandboxed import SandboxedDomain

DOMAINS = registry.available()
HOSTILE = ("<answer>" * 20_000, "<answer>" + "9" * 200_000 + "</answer>",
           "<answer>" + "(" * 50_000 + "</answer>", "<answer>9**9**9**9**9</answer>",
           "<answer>" + "[" * 10_000 + "</answer>",
           "<answer>__import__('os').system('true')</answer>")
PROMPT_SECONDS = 10.0  # generous: math-verify's own child may be starting; CI is shared
SANDBOX_SECONDS = 30.0  # executed answers (a power tower) run to the sandbox's time limit


@functools.lru_cache(maxsize=None)
def _domain_and_task(name):
  domain = registry.make_domain(name)
  return domain, domain.generate(np.random.default_rng(0), min(domain.difficulty_levels))


def _sandbox_for(domain, request):
  """The module's shared sandbox pool for domains that execute model output, else None."""
  return request.getfixturevalue("sb") if isinstance(domain, SandboxedDomain) else None


def test_at_least_110_domains_are_registered():
  assert {"arithmetic", "countdown", "math", "extraction", "retrieval", "code", "sql",
          "shell"} <= set(DOMAINS)
  assert len(DOMAINS) >= 110


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
def test_demonstration_scores_one_also_through_our_tokenizer(name, tokenizer, request):
  domain, task = _domain_and_task(name)
  sandbox = _sandbox_for(domain, request)
  demo = domain.demonstration(task)
  verdict = domain.verify(task, demo, sandbox=sandbox)
  assert verdict.correct and verdict.format_ok, verdict
  decoded = tokenizer.decode(tokenizer.encode(demo))
  assert domain.verify(task, decoded, sandbox=sandbox).correct, decoded[-300:]
  for template in (chat_template.PLAIN, chat_template.CHATML):
    rendered = chat_template.render(template, [{"role": "user", "content": task.prompt}])
    assert task.prompt in rendered
  prompt_ids = tokenizer.encode(task.prompt)
  assert " ".join(tokenizer.decode(prompt_ids).split()) == " ".join(task.prompt.split())


@pytest.mark.parametrize("name", DOMAINS)
def test_wrong_malformed_truncated_and_hostile_answers_score_below_one(name, request):
  domain, task = _domain_and_task(name)
  sandbox = _sandbox_for(domain, request)
  demo = domain.demonstration(task)
  answers = {"wrong": "<think>w</think>\n<answer>qwerty zxcv</answer>",
             "empty": "<think>w</think>\n<answer></answer>",
             "no tags": demo.replace("<answer>", "").replace("</answer>", ""),
             "truncated": demo[:len(demo) // 2]}  # as a length limit cuts a generation
  answers.update({f"hostile {i}": text for i, text in enumerate(HOSTILE)})
  for kind, text in answers.items():
    start = time.perf_counter()
    verdict = domain.verify(task, text, sandbox=sandbox)
    elapsed = time.perf_counter() - start
    if kind == "no tags":  # sandboxed domains take bare code by design; format credit is lost
      assert verdict.score < 1 or not verdict.format_ok, (kind, verdict)
    else:
      assert verdict.score < 1, (kind, verdict)
    assert elapsed < (SANDBOX_SECONDS if sandbox else PROMPT_SECONDS), (kind, elapsed)


def test_every_text_domain_runs_from_one_mixture_config():
  """One TaskConfig naming every text and rg/* domain: each keeps its own level list,
  a batch draws across them, and every drawn task's demonstration verifies."""
  from rl_post.data.mixture import TaskConfig, TaskMixture
  names = tuple(n for n in DOMAINS if not isinstance(_domain_and_task(n)[0], SandboxedDomain))
  mixture = TaskMixture(TaskConfig(domains=names, floors=(0.5 / len(names),), heldout_size=0,
                                   curriculum={"enabled": True}), seed=0)
  assert all(mixture.levels[n] == mixture.domains[n].difficulty_levels for n in names)
  batch = mixture.sample(step=0, n=len(names))
  assert len({t.domain for t in batch}) > len(names) // 2
  for task in batch:
    domain = mixture.domain_of(task)
    assert domain.verify(task, domain.demonstration(task)).correct, task.task_id


@pytest.mark.parametrize("name", DOMAINS)
def test_tasks_survive_the_eval_set_encoding(name):
  from rl_post.data import eval_sets
  _, task = _domain_and_task(name)
  assert eval_sets.decode_record(eval_sets.encode_task(task)) == task


def _format_cases():
  """(domain, answer format) for every format other than "tags" that a domain offers."""
  return [(name, fmt) for name in DOMAINS
          for fmt in _domain_and_task(name)[0].answer_formats if fmt != "tags"]


@pytest.mark.parametrize("name,fmt", _format_cases())
def test_every_answer_format_a_domain_offers_asks_reads_and_demonstrates(name, fmt, request):
  """The prompt ends with the format's instruction, the demonstration in that format
  scores 1 and is strictly formatted; the same answer given loosely still counts
  (answer-only) without format credit. final_number is checked where the reference
  answer is a number (the config chooses it for numeric domains)."""
  tags_domain, tags_task = _domain_and_task(name)
  reference = answers.tag_content(tags_domain.demonstration(tags_task))
  if fmt == "final_number" and answers.read(reference, "final_number").answer != reference:
    return  # a non-numeric answer: this format is not for this task
  domain = registry.make_domain(name, {"answer_format": fmt})
  task = domain.generate(np.random.default_rng(0), min(domain.difficulty_levels))
  assert task.task_id == tags_task.task_id  # the format changes the wording, not the task
  assert "<answer>" not in task.prompt and task.prompt != tags_task.prompt
  sandbox = _sandbox_for(domain, request)
  verdict = domain.verify(task, domain.demonstration(task), sandbox=sandbox)
  assert verdict.correct and verdict.format_ok, verdict
  if fmt == "boxed":
    loose = f"\\boxed{{wrong}} first.\nThen: \\boxed{{{reference}}}"
  elif fmt == "final_number":
    loose = f"{reference} is my answer, hope it helps"
  elif fmt == "last_line":
    loose = f"Let me see, so the answer: {reference}"
  else:  # code_block: a second fence before the answer's
    loose = "```\nnot this\n```\n" + domain.demonstration(task)
  verdict = domain.verify(task, loose, sandbox=sandbox)
  assert verdict.correct and not verdict.format_ok, (loose, verdict)


def test_a_format_a_domain_does_not_offer_is_a_config_error():
  from rl_post.data.mixture import TaskConfig, TaskMixture
  from rl_post.errors import ConfigError
  with pytest.raises(ValueError, match=r"answer_format must be one of \['tags', 'code_block'\]"):
    registry.make_domain("code", {"answer_format": "final_number"})
  with pytest.raises(ConfigError, match="tasks.domain_options.countdown"):
    TaskMixture(TaskConfig(domains=("countdown",), heldout_size=0,
                           domain_options={"countdown": {"answer_format": "final_number"}}),
                seed=0)
