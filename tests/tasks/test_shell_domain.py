"""Shell domain: generated trees, instructions, and the files a script leaves."""

import os
import time

import numpy as np
import pytest

from rl_post.tasks import registry, shell_tasks
from rl_post.tasks.shell import Shell, tree_score
from tests.tasks.conftest import first_task

TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def domain():
  return Shell(timeout_s=TIMEOUT_S, memory_mb=128)


def _answer(script):
  return f"<think>s</think>\n<answer>\n```bash\n{script}\n```\n</answer>"


def test_generator_is_deterministic_and_never_trivial(domain):
  for level in domain.difficulty_levels:
    a = [domain.generate(np.random.default_rng(9), level) for _ in range(5)]
    b = [domain.generate(np.random.default_rng(9), level) for _ in range(5)]
    assert a == b and all(t.target != t.metadata["files"] for t in a)
  assert registry.make_domain("shell").name == "shell"


def test_demonstrations_score_one(domain, sb):
  rng = np.random.default_rng(0)
  tasks = [domain.generate(rng, level) for level in domain.difficulty_levels for _ in range(4)]
  assert {t.metadata["family"] for t in tasks} == {
      "count_ext", "find_word", "count_lines", "rename_ext", "replace_word", "move_ext",
      "delete_word"}
  verdicts = domain.verify_batch(tasks, [domain.demonstration(t) for t in tasks], sandbox=sb)
  assert [v.error for v in verdicts] == [None] * len(tasks)
  assert all(v.correct and v.format_ok for v in verdicts)


def test_tree_score_counts_only_the_paths_that_matter():
  initial = {"a.log": "x\n", "b.txt": "y\n", "c.md": "z\n"}
  expected = shell_tasks.apply(initial, "rename_ext", {"ext": "log", "new_ext": "md",
                                                       "word": "TODO"})
  assert expected == {"a.md": "x\n", "b.txt": "y\n", "c.md": "z\n"}
  b = {p: c.encode() for p, c in expected.items()}
  assert tree_score(initial, expected, b) == 1.0
  assert tree_score(initial, expected, {p: c.encode() for p, c in initial.items()}) == 0.0
  damaged = dict(b, **{"b.txt": b"oops"})
  assert tree_score(initial, expected, damaged) == pytest.approx(2 / 3)
  assert tree_score(initial, expected, b, omitted=("link",)) == pytest.approx(2 / 3)


def test_half_done_work_gets_partial_credit(domain, sb):
  task = first_task(domain, np.random.default_rng(4), 3,
                    lambda t: t.metadata["family"] == "rename_ext"
                    and sum(p.endswith("." + t.metadata["params"]["ext"])
                            for p in t.metadata["files"]) >= 2)
  ext, new = task.metadata["params"]["ext"], task.metadata["params"]["new_ext"]
  one = f"f=$(find . -name '*.{ext}' | head -n 1)\nmv \"$f\" \"${{f%.{ext}}}.{new}\""
  verdict = domain.verify(task, _answer(one), sandbox=sb)
  assert 0 < verdict.score < 1


def test_wrong_malformed_and_hostile_scripts_fail_promptly(domain, sb, tmp_path):
  task = domain.generate(np.random.default_rng(3), 4)
  outside = str(tmp_path / "escaped")
  scripts = {
      "nothing": "true",
      "wipe": "rm -rf ./* /work /tmp 2>/dev/null; rm -rf / 2>/dev/null; true",
      "outside": f"echo x > {outside}; echo x > ../escaped; echo x > /etc/escaped",
      "loop": "while :; do :; done",
      "fork bomb": ":(){ :|:& };:",
      "symlink answer": f"ln -s /etc/passwd {shell_tasks.ANSWER}",
      "output flood": "yes",
      "malformed": "if then fi (",
  }
  answers = [_answer(s) for s in scripts.values()]
  demo = domain.demonstration(task)
  answers += [demo[:len(demo) // 2], ""]
  start = time.monotonic()
  verdicts = domain.verify_batch([task] * len(answers), answers, sandbox=sb)
  assert time.monotonic() - start < len(answers) * TIMEOUT_S
  assert all(v.score < 1 for v in verdicts), [(v.score, v.error) for v in verdicts]
  assert not os.path.exists(outside)
  assert domain.verify(task, demo, sandbox=sb).correct
