r"""Generation and verification cost per task for the text domains; prints a table, writes JSON.

  python experiments/benchmarks/text_domains.py --out=experiments/benchmarks/results/text_domains.json

For every domain (arithmetic, countdown, math, extraction, retrieval and the
rg/* reasoning-gym domains) and every difficulty level: mean milliseconds to
generate a task, to verify its demonstration, a wrong answer and a hostile
one (a 1 MB completion of unclosed <answer> tags), and the demonstration
pass rate. Baselines in the same run:
  * answer extraction: ours (two reverse searches) against the usual
    non-greedy regex, on growing runs of unclosed tags (the regex is
    quadratic);
  * math-verify: our child process with its own time limit against calling
    math-verify in-process (no time limit off the main thread).
"""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from rl_post.tasks import registry  # noqa: E402
from rl_post.tasks.base import extract_answer  # noqa: E402

_DOMAINS = flags.DEFINE_list("domains", None, "Domains (default: every text and rg/* domain).")
_TASKS = flags.DEFINE_integer("tasks", 3, "Tasks per (domain, level).")
_LEVELS = flags.DEFINE_enum("levels", "all", ["all", "min", "max"], "Levels to time.")
_TAG_RUNS = flags.DEFINE_list("tag_runs", ["500", "1000", "2000", "4000"],
                              "Unclosed-tag counts for the extraction baseline.")
_MATH_CHECKS = flags.DEFINE_integer("math_checks", 24, "Checks per math-verify path.")
_OUT = flags.DEFINE_string("out", "experiments/benchmarks/results/text_domains.json", "JSON path.")

TEXT_DOMAINS = ("arithmetic", "countdown", "math", "extraction", "retrieval")
HOSTILE = "<answer>" * 131_072  # 1 MB
WRONG = "<think>w</think>\n<answer>qwerty zxcv</answer>"


def _ms(fn):
  start = time.perf_counter()
  result = fn()
  return (time.perf_counter() - start) * 1e3, result


def time_domain(name: str, tasks: int, levels: str) -> list[dict]:
  domain = registry.make_domain(name)
  chosen = {"all": domain.difficulty_levels, "min": domain.difficulty_levels[:1],
            "max": domain.difficulty_levels[-1:]}[levels]
  rows = []
  domain.verify(domain.generate(np.random.default_rng(0), chosen[0]), WRONG)  # start-up untimed
  for level in chosen:
    rng = np.random.default_rng(level)
    gen, demo, wrong, hostile, passed = [], [], [], [], 0
    for _ in range(tasks):
      ms, task = _ms(lambda: domain.generate(rng, level))
      gen.append(ms)
      ms, verdict = _ms(lambda: domain.verify(task, domain.demonstration(task)))
      demo.append(ms)
      passed += verdict.correct
      wrong.append(_ms(lambda: domain.verify(task, WRONG))[0])
      hostile.append(_ms(lambda: domain.verify(task, HOSTILE))[0])
    rows.append({"domain": name, "level": int(level), "tasks": tasks,
                 "generate_ms": float(np.mean(gen)), "verify_demo_ms": float(np.mean(demo)),
                 "verify_wrong_ms": float(np.mean(wrong)),
                 "verify_hostile_ms": float(np.mean(hostile)), "demo_pass_rate": passed / tasks,
                 "prompt_chars": len(task.prompt)})
  return rows


def _regex_extract(text):
  matches = re.findall(r"<answer>(.*?)</answer>", text, re.S)
  return matches[-1].strip() if matches else None


def extraction_baseline(tag_runs) -> list[dict]:
  rows = []
  for n in tag_runs:
    text = "<answer>x " * n  # the regex retries from every tag to the end
    ours_ms, ours = _ms(lambda: extract_answer(text))
    regex_ms, theirs = _ms(lambda: _regex_extract(text))
    assert ours is None and theirs is None
    rows.append({"unclosed_tags": n, "ours_ms": ours_ms, "regex_ms": regex_ms})
  return rows


def math_baseline(checks: int = 24) -> dict:
  """Per-check cost on generated answers (distinct for each path: math-verify caches)."""
  import logging
  logging.disable(logging.WARNING)  # math-verify warns that its own timeout is off
  from math_verify import parse, verify
  from rl_post.tasks.math import Math
  from rl_post.tasks.math_worker import MathChecker, _as_latex
  domain = Math()
  levels = domain.difficulty_levels

  def golds(seed):
    rng = np.random.default_rng(seed)
    return [domain.generate(rng, levels[i % len(levels)]).target for i in range(checks)]
  checker = MathChecker(timeout_s=5.0)
  checker.equal("1", "1")  # start-up (imports) is not timed
  child_golds, inproc_golds = golds(1), golds(2)
  child_ms, _ = _ms(lambda: [checker.equal(g, g) for g in child_golds])
  checker.close()
  parse("$1$", parsing_timeout=None)  # imports, like the child's start-up
  inproc_ms, _ = _ms(lambda: [verify(parse(_as_latex(g), parsing_timeout=None),
                                     parse(_as_latex(g), parsing_timeout=None),
                                     timeout_seconds=None) for g in inproc_golds])
  return {"checks": checks, "child_ms_per_check": child_ms / checks,
          "in_process_ms_per_check": inproc_ms / checks}


def _table(rows):
  head = (f"{'domain':34s} {'lvl':>3s} {'gen ms':>8s} {'demo ms':>8s} {'wrong ms':>8s} "
          f"{'1MB ms':>8s} {'pass':>5s} {'chars':>7s}")
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(f"{r['domain']:34s} {r['level']:3d} {r['generate_ms']:8.2f} "
                 f"{r['verify_demo_ms']:8.2f} {r['verify_wrong_ms']:8.2f} "
                 f"{r['verify_hostile_ms']:8.2f} {r['demo_pass_rate']:5.2f} "
                 f"{r['prompt_chars']:7d}")
  return "\n".join(lines)


def run(domains, tasks: int, levels: str, tag_runs, math_checks: int) -> dict:
  rows = []
  for i, name in enumerate(domains):
    rows += time_domain(name, tasks, levels)
    print(f"[{i + 1}/{len(domains)}] {name}", file=sys.stderr, flush=True)
  return {"domains": rows, "extraction_baseline": extraction_baseline(tag_runs),
          "math_baseline": math_baseline(math_checks)}


def main(argv):
  del argv
  domains = _DOMAINS.value or [n for n in registry.available()
                               if n in TEXT_DOMAINS or n.startswith("rg/")]
  result = run(domains, _TASKS.value, _LEVELS.value, [int(n) for n in _TAG_RUNS.value],
               _MATH_CHECKS.value)
  print(_table(result["domains"]))
  print("\nanswer extraction on unclosed tags (ms): ours vs non-greedy regex")
  for r in result["extraction_baseline"]:
    print(f"  {r['unclosed_tags']:6d} tags: {r['ours_ms']:8.3f} vs {r['regex_ms']:10.1f}")
  m = result["math_baseline"]
  print(f"\nmath-verify per check: child process {m['child_ms_per_check']:.2f} ms, "
        f"in-process {m['in_process_ms_per_check']:.2f} ms (no time limit)")
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {_OUT.value}")


if __name__ == "__main__":
  app.run(main)
