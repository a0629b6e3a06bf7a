"""Episode rows split over processes (rl_post/envs/process_rows.py), two threads as two hosts.

The collective (`allgather_objects`) and the process index are replaced by
a thread barrier and a per-thread index, so the split's bookkeeping (which
rows a host steps and verifies, that every host gets every row's step and
counts, the metrics' combination) is checked here in seconds;
tests/parallel/test_multihost_episodes.py runs it on real processes.
"""

import pickle
import threading
import types

import jax
import numpy as np
import pytest

from rl_post.envs import process_rows
from rl_post.envs.domains import DOMAINS, make_env
from rl_post.envs.metrics import EpisodeMetrics
from rl_post.envs.policies import oracle
from rl_post.envs.tools import ToolLimits

LIMITS = ToolLimits(per_call_s=5.0, per_episode_s=30.0)
BAD_CALL = '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'


class ThreadHosts:
  """`count` threads as hosts: a per-thread process index and a barrier all-gather
  (objects pickled both ways, as the real one sends them)."""

  def __init__(self, count):
    self.count, self.local = count, threading.local()
    self.slots, self.barrier = [None] * count, threading.Barrier(count)

  def gather(self, obj):
    self.slots[self.local.index] = pickle.dumps(obj)
    self.barrier.wait()
    out = [pickle.loads(s) for s in self.slots]
    self.barrier.wait()  # nobody writes the next round's slot before every host read this one
    return out

  def jax(self):
    return types.SimpleNamespace(process_count=lambda: self.count,
                                 process_index=lambda: self.local.index)


class CountingSandbox:
  """The shared sandbox, one caller at a time, recording how many runs each call made."""

  def __init__(self, sandbox, lock):
    self.sandbox, self.lock, self.runs = sandbox, lock, 0
    self.config = sandbox.config

  def run_many(self, requests):
    with self.lock:
      self.runs += len(requests)
      return self.sandbox.run_many(requests)


def _tasks():
  rng = np.random.default_rng(0)
  return [DOMAINS["data_questions"].generate(rng, 1) for _ in range(3)]


def _policy(bad_first):
  """The oracle, but `bad_first` (a task id) makes a bad call first: errors count too."""
  def turn(task, observations):
    if task.task_id == bad_first and len(observations) == 1:
      return BAD_CALL
    return oracle(task, observations)
  return turn


def _episodes(tasks, sandbox, policy):
  """The episode loop's use of the split: a text policy for every row, tools by owner."""
  envs = [make_env("data_questions", limits=LIMITS, max_turns=6) for _ in tasks]
  observations = [[env.reset(task)] for env, task in zip(envs, tasks)]
  metrics = EpisodeMetrics()
  active = list(range(len(envs)))
  while active:
    texts = [policy(tasks[b], observations[b]) for b in active]
    outs = process_rows.step_rows(envs, active, texts, sandbox, metrics)
    for b, (observation, _, _) in zip(active, outs):
      observations[b].append(observation)
    active = [b for b, (_, done, _) in zip(active, outs) if not done]
  rewards = process_rows.finish_rows(envs, sandbox, metrics)
  for b in process_rows.owned(len(envs)):
    metrics.record_episode(envs[b].tool_calls, envs[b].turns, rewards[b])
  counts = [(e.turns, e.tool_calls, e.call_successes, e.verify_error) for e in envs]
  return observations, rewards, counts, process_rows.across_processes(metrics)


def _computed(metrics):
  return {k: v for k, v in metrics.summary().items() if not k.endswith("_seconds")}


def test_two_hosts_step_their_own_rows_and_share_every_result(sandbox, monkeypatch):
  tasks = _tasks()
  policy = _policy(tasks[1].task_id)
  lock = threading.Lock()
  one = CountingSandbox(sandbox, lock)
  want = _episodes(tasks, one, policy)
  assert want[1] == [1.0, 1.0, 1.0]  # the oracle solves every row, the bad call aside
  assert _computed(want[3])["errors/rm/unknown_tool"] == 1
  # host 0 will own row 0, host 1 rows 1 and 2 (process_block): their sandbox runs alone
  alone = [CountingSandbox(sandbox, lock) for _ in range(2)]
  _episodes(tasks[:1], alone[0], policy)
  _episodes(tasks[1:], alone[1], policy)

  hosts = ThreadHosts(2)
  monkeypatch.setattr(process_rows, "allgather_objects", hosts.gather)
  monkeypatch.setattr(process_rows, "jax", hosts.jax())
  boxes, got, failures = [CountingSandbox(sandbox, lock) for _ in range(2)], [None, None], []

  def host(index):
    hosts.local.index = index
    try:
      got[index] = _episodes(tasks, boxes[index], policy)
    except BaseException as e:  # noqa: BLE001 - reported below
      failures.append(e)
      hosts.barrier.abort()

  threads = [threading.Thread(target=host, args=(i,)) for i in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(timeout=120)
  assert not failures, failures
  for observations, rewards, counts, metrics in got:
    assert observations == want[0] and rewards == want[1] and counts == want[2]
    assert _computed(metrics) == _computed(want[3])
  # each host ran its own rows' tool calls and verification, and nothing else
  assert [b.runs for b in boxes] == [a.runs for a in alone] and alone[0].runs > 0
  assert sum(b.runs for b in boxes) == one.runs


def test_concurrent_metrics_add_counts_and_keep_the_longest_seconds():
  a, b = EpisodeMetrics(), EpisodeMetrics()
  a.calls["sql"], a.successes["sql"], a.tool_seconds, a.generation_seconds = 3, 2, 1.0, 5.0
  b.calls["sql"], b.errors[("sql", "timeout")] = 1, 1
  b.tool_seconds, b.generation_seconds = 2.0, 4.0
  a.record_episode(3, 4, 1.0, 10)
  b.record_episode(1, 2, 0.0, 20)
  both = EpisodeMetrics.concurrent([a, b])
  assert both.calls["sql"] == 4 and both.successes["sql"] == 2
  assert both.errors[("sql", "timeout")] == 1
  assert both.episode_tokens == [10, 20] and both.rewards == [1.0, 0.0]
  assert (both.tool_seconds, both.generation_seconds) == (2.0, 5.0)
  assert EpisodeMetrics.concurrent([]).summary()["episodes"] == 0


def test_step_rows_needs_a_turn_per_active_row(sandbox):
  envs = [make_env("data_questions", limits=LIMITS) for _ in range(2)]
  with pytest.raises(ValueError, match="2 active rows but 1 turns"):
    process_rows.step_rows(envs, [0, 1], ["x"], sandbox, EpisodeMetrics())


def test_one_process_tools_say_so_on_several(monkeypatch):
  from rl_post.envs.episodes import EpisodeConfig, run_episodes
  from rl_post.envs.overlap import run_overlapped
  from rl_post.sampling.sampler import SamplingConfig
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  envs, tasks = [make_env("data_questions", limits=LIMITS)], _tasks()[:1]
  with pytest.raises(ValueError, match="checkpoint_path .* runs on one process; this run has 2"):
    run_episodes(None, envs, tasks, tokenizer=None, model_config=None,
                 sampling=SamplingConfig(max_new_tokens=32), sandbox=None, rng=0,
                 config=EpisodeConfig(turn_tokens=16), checkpoint_path="/nonexistent/x")
  with pytest.raises(ValueError, match="run_overlapped runs on one process"):
    run_overlapped(None, envs, tasks, seeds_B=[0], tokenizer=None)
