"""Scripted text policies: the oracle of each domain and a random baseline.

A policy is `(task, observations) -> turn text`, where observations[0] is
the first prompt and observations[i] the tool response after turn i.
"""

import numpy as np

from rl_post.envs import protocol
from rl_post.envs.domains import DOMAINS

_COMMANDS = ("ls", "cat *", "rm -f *.log", "echo hi > x.txt", "python3 tests/test_core.py",
             "mkdir -p logs", "true")
_QUERIES = ("SELECT 1", "SELECT name FROM sqlite_master", "SELECT * FROM nope")
_ANSWERS = ("42", "north", "ada", "")


def oracle(task, observations) -> str:
  """The built-in domain's oracle (a domain from "module:Class": its own `oracle_turn`)."""
  return DOMAINS[task.domain].oracle_turn(task, observations)


class RandomPolicy:
  """Uniformly random plausible turns: calls with random arguments, junk, or no call."""

  def __init__(self, seed: int = 0):
    self.rng = np.random.default_rng(seed)

  def __call__(self, task, observations) -> str:
    r = self.rng.integers(7)
    pick = lambda xs: str(xs[int(self.rng.integers(len(xs)))])
    if r == 0:
      return "I am not sure."
    if r == 1:
      return "<tool_call>{'name': bash}</tool_call>"
    if r == 2:
      return protocol.format_call("submit", {"answer": pick(_ANSWERS)})
    if r == 3:
      return protocol.format_call("sql", {"query": pick(_QUERIES)})
    if r == 4:
      return protocol.format_call("python", {"code": "print(open('README.md').read())"})
    return protocol.format_call("bash", {"command": pick(_COMMANDS)})
