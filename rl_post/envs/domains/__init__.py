"""Multi-step domains: tasks whose solution takes several tool calls.

Each domain is an `EnvDomain` (`base.py`): `name`, `generate(rng,
difficulty) -> Task`, `oracle_turn(task, observations) -> str` (a scripted
policy that emits the right tool calls, used by tests and as SFT
demonstrations) and `env_class`, an `Env` subclass whose verifier reads
the end state. `DOMAINS` holds the built-in ones (`repo_repair`,
`data_questions`, `fs_chores`); `make_domain` / `make_env` also take
"module:Class" for a domain defined outside the package (`registry.py`).
"""

from rl_post.envs.domains.base import EnvDomain
from rl_post.envs.domains.registry import DOMAINS, available, is_known, make_domain, make_env

__all__ = ["EnvDomain", "DOMAINS", "available", "is_known", "make_domain", "make_env"]
