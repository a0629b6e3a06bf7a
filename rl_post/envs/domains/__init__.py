"""Multi-step domains: tasks whose solution takes several tool calls.

Each domain module defines `NAME`, `generate(rng, difficulty) -> Task`,
`oracle_turn(task, observations) -> str` (a scripted policy that emits the
right tool calls, used by tests and as SFT demonstrations) and an `Env`
subclass whose verifier reads the end state.
"""

from rl_post.envs.domains import data_questions, fs_chores, repo_repair

DOMAINS = {m.NAME: m for m in (repo_repair, data_questions, fs_chores)}


def make_env(name: str, **kwargs):
  if name not in DOMAINS:
    raise ValueError(f"unknown multi-step domain {name!r}; known: {sorted(DOMAINS)}")
  return DOMAINS[name].make_env(**kwargs)
