"""Repository repair: a small generated Python package with one planted bug.

The work dir holds `<pkg>/__init__.py`, `<pkg>/core.py` (a few functions,
one of them with a planted bug), `tests/test_core.py` (visible tests, one
of which exposes the bug; run with `python3 tests/test_core.py`) and a
README. The reward is computed after the episode in a *fresh* sandbox run:
the final `core.py` is graded against hidden tests with
`sandbox.grading` (expected values stay on the host), so deleting or
editing the visible tests, printing "OK" or exiting early earn nothing.
"""

import textwrap

import numpy as np

from rl_post.envs import protocol
from rl_post.envs.base import Env
from rl_post.envs.domains.base import EnvDomain
from rl_post.envs.tools import Workspace
from rl_post.sandbox import grading
from rl_post.tasks.base import Task

NAME = "repo_repair"
PACKAGES = ("textkit", "numtools", "listops", "minilib", "utilpack")

# name -> (correct source, (good snippet, planted bug), visible args, hidden args)
FUNCTIONS = {
    "clamp": ("def clamp(x, lo, hi):\n  if x < lo:\n    return lo\n  if x > hi:\n    return hi\n"
              "  return x\n", ("    return hi\n", "    return lo\n"),
              [(5, 0, 3), (-1, 0, 3), (2, 0, 3)], [(10, 1, 4), (0, 1, 4), (3, 1, 4), (9, -2, 7)]),
    "mean": ("def mean(xs):\n  return sum(xs) / len(xs)\n",
             ("sum(xs) / len(xs)", "sum(xs) // len(xs)"),
             [([1, 2],), ([2, 4],)], [([1, 2, 4],), ([3],), ([1, 1, 1, 2],)]),
    "count_vowels": ("def count_vowels(s):\n  return sum(1 for c in s.lower() if c in 'aeiou')\n",
                     ("'aeiou'", "'aeio'"), [("hello",), ("you",)],
                     [("queue",), ("AUDIO",), ("rhythm",), ("ou",)]),
    "running_total": ("def running_total(xs):\n  out, total = [], 0\n  for x in xs:\n"
                      "    total += x\n    out.append(total)\n  return out\n",
                      ("out.append(total)", "out.append(x)"), [([1, 2, 3],)],
                      [([4, 5],), ([],), ([2, -1, 7, 0],)]),
    "is_palindrome": ("def is_palindrome(s):\n  t = ''.join(c.lower() for c in s if c.isalnum())\n"
                      "  return t == t[::-1]\n", ("c.lower() for", "c for"),
                      [("Racecar",), ("abc",)], [("Never odd or even",), ("Noon",), ("xy",)]),
    "dedupe": ("def dedupe(xs):\n  seen, out = set(), []\n  for x in xs:\n    if x not in seen:\n"
               "      seen.add(x)\n      out.append(x)\n  return out\n",
               ("      seen.add(x)\n", ""), [([1, 1, 2],)], [([3, 3, 3],), ([1, 2, 1, 2],), ([],)]),
    "word_count": ("def word_count(s):\n  return len(s.split())\n", ("s.split()", "s.split(' ')"),
                   [("a  b",), ("one two",)], [("  lead",), ("x\ty z",), ("",)]),
}


def _call(name, args):
  return f"{name}({', '.join(repr(a) for a in args)})"


def _values(source, name, arg_list):
  namespace = {}
  exec(compile(source, "<generated>", "exec"), namespace)  # trusted: generated here
  return [namespace[name](*args) for args in arg_list]


class RepoRepairEnv(Env):
  tools = ("bash", "python", "submit")

  def initial_workspace(self, task):
    return Workspace(files={k: v.encode() for k, v in task.metadata["files"].items()})

  def _prepared(self):
    source = self.workspace.files.get(self.task.metadata["module"])
    if source is None:
      return None
    cases = [grading.FunctionCase(expr, expected) for expr, expected in self.task.target]
    return grading.prepare_python_tests(source, cases, timeout_s=self.limits.per_call_s,
                                        memory_mb=self.limits.memory_mb)

  def verification_request(self):
    self._verification = self._prepared()
    return None if self._verification is None else self._verification.request

  def score(self, result, sandbox=None):
    prepared = getattr(self, "_verification", None)
    if prepared is None or result is None:
      return 0.0
    return 1.0 if grading.score_python_tests(prepared, result).all_passed else 0.0


class RepoRepair(EnvDomain):
  """A planted bug graded by hidden tests (tools: bash, python, submit)."""
  name = NAME
  env_class = RepoRepairEnv

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    if difficulty not in (1, 2, 3):
      raise ValueError(f"{NAME}: difficulty must be 1, 2 or 3, got {difficulty!r}")
    pkg = str(rng.choice(PACKAGES))
    names = [str(n) for n in rng.choice(sorted(FUNCTIONS), size=difficulty + 1, replace=False)]
    buggy = names[int(rng.integers(len(names)))]
    fixed = "\n\n".join(FUNCTIONS[n][0] for n in names)
    good, bad = FUNCTIONS[buggy][1]
    broken_fn = FUNCTIONS[buggy][0].replace(good, bad, 1)
    broken = "\n\n".join(broken_fn if n == buggy else FUNCTIONS[n][0] for n in names)
    visible, hidden = [], []
    for n in names:
      _, _, vis, hid = FUNCTIONS[n]
      visible += [(n, a, v) for a, v in zip(vis, _values(fixed, n, vis))]
      hidden += [grading.FunctionCase(_call(n, a), v) for a, v in zip(hid, _values(fixed, n, hid))]
    test_lines = "".join(f"check({_call(n, a)!r}, {_call(n, a)}, {v!r})\n" for n, a, v in visible)
    tests = textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, ".")
        from {pkg}.core import *

        failures = 0
        def check(label, got, want):
          global failures
          if got != want:
            failures += 1
            print(f"FAIL {{label}}: got {{got!r}}, want {{want!r}}")

        """) + test_lines + 'print(f"{failures} failed")\nsys.exit(1 if failures else 0)\n'
    files = {f"{pkg}/__init__.py": "", f"{pkg}/core.py": broken, "tests/test_core.py": tests,
             "README.md": f"# {pkg}\nSmall helpers: {', '.join(names)}.\n"}
    prompt = (f"The package {pkg}/ in your work dir has a bug: `python3 tests/test_core.py` "
              "fails. Find and fix the bug in the package (do not edit the tests), then call "
              "submit.")
    return Task(task_id=f"{NAME}-{difficulty}-{int(rng.integers(1 << 30))}", domain=NAME,
                prompt=prompt, difficulty=difficulty, target=[(c.expr, c.expected) for c in hidden],
                metadata={"files": files, "module": f"{pkg}/core.py", "fixed_source": fixed,
                          "buggy_function": buggy})

  def oracle_turn(self, task: Task, observations: list) -> str:
    """Reads the code, runs the tests, rewrites the module, reruns them, submits."""
    module = task.metadata["module"]
    fix = f"cat > {module} <<'RL_POST_EOF'\n{task.metadata['fixed_source']}RL_POST_EOF\n"
    turns = [protocol.format_call("bash", {"command": f"ls -R; cat {module}"}),
             protocol.format_call("bash", {"command": "python3 tests/test_core.py"}),
             protocol.format_call("bash", {"command": fix}),
             protocol.format_call("bash", {"command": "python3 tests/test_core.py"}),
             protocol.format_call("submit", {})]
    return turns[min(len(observations) - 1, len(turns) - 1)]
