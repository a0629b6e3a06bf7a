"""Multi-step domains: the oracle solves every task, a random policy almost none."""

import numpy as np
import pytest

from rl_post.envs import driver, policies
from rl_post.envs.domains import DOMAINS, make_env, repo_repair
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.tools import ToolLimits

LIMITS = ToolLimits(per_call_s=5.0, per_episode_s=20.0)


def _tasks(name, n, seed=0):
  rng = np.random.default_rng(seed)
  return [DOMAINS[name].generate(rng, 1 + i % 3) for i in range(n)]


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_oracle_reaches_100_percent(sandbox, name):
  tasks = _tasks(name, 6)
  envs = [make_env(name, limits=LIMITS, max_turns=8) for _ in tasks]
  metrics = EpisodeMetrics()
  rewards = driver.run_text_episodes(envs, tasks, policies.oracle, sandbox, metrics)
  assert rewards == [1.0] * len(tasks), [e.transcript for e, r in zip(envs, rewards) if r < 1]
  summary = metrics.summary()
  assert summary["calls_per_episode"] >= 3 and summary["turns_per_episode"] >= 3
  if name == "repo_repair":  # the visible tests fail before the fix, as intended
    assert summary["tool_call_success_rate"] < 1.0
    assert metrics.errors[("bash", "tool_error")] == len(tasks)
  else:
    assert summary["tool_call_success_rate"] == 1.0


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_random_policy_scores_about_zero(sandbox, name):
  tasks = _tasks(name, 8, seed=1)
  envs = [make_env(name, limits=LIMITS, max_turns=4) for _ in tasks]
  metrics = EpisodeMetrics()
  rewards = driver.run_text_episodes(envs, tasks, policies.RandomPolicy(0), sandbox, metrics)
  assert sum(rewards) <= 1
  assert metrics.errors  # junk calls are counted by kind, nothing crashed


def test_untouched_start_state_scores_zero(sandbox):
  for name in DOMAINS:
    for task in _tasks(name, 3, seed=2):
      env = make_env(name, limits=LIMITS)
      env.reset(task)
      assert env.final_reward(sandbox) == 0.0, name


def test_every_planted_bug_is_caught_by_hidden_tests():
  for name, (source, (good, bad), _, hidden) in repo_repair.FUNCTIONS.items():
    broken = source.replace(good, bad, 1)
    assert broken != source, name
    assert (repo_repair._values(source, name, hidden) !=
            repo_repair._values(broken, name, hidden)), name


def test_tests_cannot_be_gamed(sandbox):
  task = _tasks("repo_repair", 1, seed=3)[0]
  module = task.metadata["module"]
  cheats = [f"printf 'import os\\nos._exit(0)\\n' > {module}",
            "printf 'import sys\\nsys.exit(0)\\n' > tests/test_core.py",
            f"rm {module}"]
  for cheat in cheats:
    env = make_env("repo_repair", limits=LIMITS)
    env.reset(task)
    from rl_post.envs import protocol
    env.step(protocol.format_call("bash", {"command": cheat}), sandbox)
    env.step(protocol.format_call("submit", {}), sandbox)
    assert env.done and env.final_reward(sandbox) == 0.0, cheat


def test_python_tool_imports_the_work_dir_and_is_stateless(sandbox):
  from rl_post.envs import protocol
  task = _tasks("repo_repair", 1, seed=4)[0]
  pkg = task.metadata["module"].split("/")[0]
  env = make_env("repo_repair", limits=LIMITS)
  env.reset(task)
  code = f"import {pkg}.core\nopen('new.txt', 'w').write('x')\nprint('imported', {pkg}.core.__name__)"
  observation, _, info = env.step(protocol.format_call("python", {"code": code}), sandbox)
  assert info.error_kind is None and f"imported {pkg}.core" in observation
  assert "new.txt" not in env.workspace.files  # python runs on a copy
