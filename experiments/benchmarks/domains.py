"""Generation and verification cost per task for every registered domain.

  python experiments/benchmarks/domains.py --tasks_per_domain=64 \
      --grading_completions=128 --repeats=3 \
      --output=experiments/benchmarks/results/domains.json

Part 1: for each domain in the registry, draws --tasks_per_domain tasks
spread over its difficulty levels, then verifies their demonstrations in
one `verify_batch` through the shared sandbox (text-only domains ignore
it); reports ms per task for each, and the fraction that scored 1 (every
demonstration must). Sandbox-executed domains are warmed with one batch
first, so one-off costs (imports, HumanEval's case recording) are not
counted in the per-task figure; HumanEval's recording of all 164 problems
and the check that every canonical solution passes are reported on their
own (--humaneval_check).

Part 2: the code domain's batch grading rate: --grading_completions
completions (demonstrations of generated problems) graded through the
shared sandbox (`verify_batch`, one `run_many`), against one
`subprocess.run([python, "-c", program])` per completion, where the
program is the completion plus plain `assert`s, run with the same number of
threads as the sandbox has workers. Interleaved --repeats times; the table
shows medians. Prints tables, writes JSON.
"""

import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import time

from absl import app
from absl import flags
import numpy as np

from rl_post.sandbox import Sandbox, SandboxConfig
from rl_post.tasks import registry
from rl_post.tasks.sandboxed import SandboxedDomain, extract_code

_TASKS = flags.DEFINE_integer("tasks_per_domain", 64, "Tasks generated and verified per domain.")
_COMPLETIONS = flags.DEFINE_integer("grading_completions", 128,
                                    "Code completions per grading-rate measurement.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Interleaved repeats of the grading comparison.")
_WORKERS = flags.DEFINE_integer("num_workers", 2, "Sandbox workers (and baseline threads).")
_HUMANEVAL = flags.DEFINE_bool("humaneval_check", True,
                               "Record and check all 164 HumanEval canonical solutions.")
_OUTPUT = flags.DEFINE_string("output", "experiments/benchmarks/results/domains.json",
                              "Where to write the JSON results.")


def _tasks_for(domain, n, seed=0):
  rng = np.random.default_rng(seed)
  levels = domain.difficulty_levels
  return [domain.generate(rng, levels[i % len(levels)]) for i in range(n)]


def domain_costs(name, sandbox, n):
  """ms per task for generation and for verification of demonstrations."""
  domain = registry.make_domain(name)
  if isinstance(domain, SandboxedDomain):  # warm-up batch: imports, recordings, caches
    warm = _tasks_for(domain, min(n, 8), seed=1)
    domain.verify_batch(warm, [domain.demonstration(t) for t in warm], sandbox=sandbox)
  start = time.perf_counter()
  tasks = _tasks_for(domain, n)
  gen_s = time.perf_counter() - start
  if hasattr(domain, "record_cases"):
    domain.record_cases([t.task_id for t in tasks], sandbox)  # same draw as the warm-up's pool
  demos = [domain.demonstration(t) for t in tasks]
  start = time.perf_counter()
  verdicts = domain.verify_batch(tasks, demos, sandbox=sandbox)
  verify_s = time.perf_counter() - start
  return {"domain": name, "tasks": n, "sandboxed": isinstance(domain, SandboxedDomain),
          "generate_ms_per_task": 1e3 * gen_s / n, "verify_ms_per_task": 1e3 * verify_s / n,
          "demonstrations_correct": sum(v.correct for v in verdicts) / n}


def humaneval_check(sandbox):
  """Records all 164 problems' cases and grades every canonical solution."""
  domain = registry.make_domain("humaneval")
  tasks = domain.tasks()
  start = time.perf_counter()
  domain.record_cases([t.task_id for t in tasks], sandbox)
  record_s = time.perf_counter() - start
  start = time.perf_counter()
  verdicts = domain.verify_batch(tasks, [domain.demonstration(t) for t in tasks], sandbox=sandbox)
  return {"problems": len(tasks), "canonical_passed": sum(v.correct for v in verdicts),
          "cases": sum(len(domain.cases(t.task_id)) for t in tasks),
          "record_s": record_s, "grade_s": time.perf_counter() - start}


def _assert_program(task, completion):
  code = extract_code(completion)
  asserts = "\n".join(f"assert {expr} == {expected!r}" for expr, expected in task.target)
  return f"{code}\ncandidate = {task.metadata['entry_point']}\n{asserts}\n"


def grading_rates(sandbox, n, repeats, workers, python):
  """Completions/s: sandbox verify_batch vs one subprocess.run each."""
  code = registry.make_domain("code")
  tasks = _tasks_for(code, n, seed=2)
  completions = [code.demonstration(t) for t in tasks]
  programs = [_assert_program(t, c) for t, c in zip(tasks, completions)]

  def via_sandbox():
    return sum(v.correct for v in code.verify_batch(tasks, completions, sandbox=sandbox))

  def via_subprocess():
    run = lambda p: subprocess.run([python, "-c", p], capture_output=True, timeout=30,  # pylint: disable=unnecessary-lambda-assignment
                                   check=False).returncode == 0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
      return sum(pool.map(run, programs))

  systems = {"shared sandbox (run_many)": via_sandbox,
             "subprocess.run per completion": via_subprocess}
  samples = {k: [] for k in systems}
  passed = {}
  for _ in range(repeats):
    for label, fn in systems.items():
      start = time.perf_counter()
      passed[label] = fn()
      samples[label].append(n / (time.perf_counter() - start))
  return [{"system": k, "completions": n, "concurrency": workers,
           "completions_per_s": statistics.median(v), "all_runs_per_s": v,
           "passed": passed[k]} for k, v in samples.items()]


def _table(rows, columns):
  head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)
  fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # pylint: disable=unnecessary-lambda-assignment
  return head + "".join("\n| " + " | ".join(fmt(r[c]) for c in columns) + " |" for r in rows)


def main(argv):
  del argv
  config = SandboxConfig(num_workers=_WORKERS.value, timeout_s=10.0, memory_mb=512)
  with Sandbox(config) as sandbox:
    costs = [domain_costs(name, sandbox, _TASKS.value) for name in registry.available()]
    rates = grading_rates(sandbox, _COMPLETIONS.value, _REPEATS.value, _WORKERS.value,
                          config.python_executable)
    he = humaneval_check(sandbox) if _HUMANEVAL.value else None
  print(_table(costs, ["domain", "tasks", "sandboxed", "generate_ms_per_task",
                       "verify_ms_per_task", "demonstrations_correct"]))
  print()
  print(_table(rates, ["system", "completions", "concurrency", "completions_per_s", "passed"]))
  speedup = rates[0]["completions_per_s"] / rates[1]["completions_per_s"]
  print(f"\nsandbox batch grading vs subprocess.run: {speedup:.2f}x")
  if he:
    print(f"\nHumanEval: {he['canonical_passed']}/{he['problems']} canonical solutions pass "
          f"({he['cases']} derived cases; recording {he['record_s']:.1f} s, grading "
          f"{he['grade_s']:.1f} s)")
  result = {"domains": costs, "code_grading": rates, "code_grading_speedup": speedup,
            "humaneval": he, "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "flags": {"tasks_per_domain": _TASKS.value, "grading_completions": _COMPLETIONS.value,
                      "repeats": _REPEATS.value, "num_workers": _WORKERS.value}}
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  with open(_OUTPUT.value, "w") as f:
    json.dump(result, f, indent=1)


if __name__ == "__main__":
  app.run(main)
