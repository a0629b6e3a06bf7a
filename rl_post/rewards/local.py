"""What one verifying process holds: domains built once, one lazy sandbox.

Used inside each reward worker, and in the trainer process itself when
`rewards.num_workers == 0` (tests of learning, the pool benchmark's
baseline).
"""

import threading
from typing import Any, Mapping, Sequence

from rl_post.rewards import verdicts as verdicts_lib
from rl_post.sandbox.config import SandboxConfig
from rl_post.tasks import registry
from rl_post.tasks.base import Domain, Task


class LazySandbox:
  """A Sandbox started on first use, so domains that never execute code
  cost nothing; a start-up failure raises in the domain (counted there)."""

  def __init__(self, config: SandboxConfig):
    self._config, self._sandbox, self._lock = config, None, threading.Lock()

  def __getattr__(self, name):
    if name.startswith("_"):
      raise AttributeError(name)
    with self._lock:
      if self._sandbox is None:
        from rl_post.sandbox.pool import Sandbox  # only where a domain runs code
        self._sandbox = Sandbox(self._config)
    return getattr(self._sandbox, name)

  def close(self):
    if self._sandbox is not None:
      self._sandbox.close()
      self._sandbox = None


class LocalVerifier:
  """Domains cached by (name, options) and the shared sandbox they get."""

  def __init__(self, sandbox_config: SandboxConfig):
    self.sandbox = LazySandbox(sandbox_config)
    self._domains: dict[tuple, Domain] = {}

  def domain(self, name: str, options: Mapping[str, Any] | None) -> Domain:
    key = (name, repr(sorted(dict(options or {}).items())))
    if key not in self._domains:
      self._domains[key] = registry.make_domain(name, options)
    return self._domains[key]

  def verify_all(self, tasks: Sequence[Task], completions: Sequence[str],
                 domain_options: Mapping[str, Mapping] | None = None) -> list[dict]:
    """Raw results (see verdicts.py) for every completion, grouped per domain."""
    if len(tasks) != len(completions):
      raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
    out: list[dict | None] = [None] * len(tasks)
    for name, idx in group_by_domain(tasks).items():
      try:
        domain = self.domain(name, (domain_options or {}).get(name))
      except Exception as e:  # a domain that cannot be built fails its items, counted
        for i in idx:
          out[i] = verdicts_lib.exception_failure(e)
        continue
      sub_tasks, sub_texts = [tasks[i] for i in idx], [completions[i] for i in idx]
      for offset, count in verdicts_lib.units(domain, len(idx)):
        results = verdicts_lib.verify_unit(domain, sub_tasks[offset:offset + count],
                                           sub_texts[offset:offset + count], self.sandbox)
        for j, result in enumerate(results):
          out[idx[offset + j]] = result
    return out

  def close(self):
    self.sandbox.close()


def group_by_domain(tasks: Sequence[Task]) -> dict[str, list[int]]:
  groups: dict[str, list[int]] = {}
  for i, task in enumerate(tasks):
    groups.setdefault(task.domain, []).append(i)
  return groups
