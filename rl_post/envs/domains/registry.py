"""Name -> EnvDomain; the one place multi-step domains are looked up.

A domain spec is a registered name ("data_questions") or an import path
"package.module:ClassName" of an `EnvDomain` subclass, like task domains
(`rl_post.tasks.registry`): a domain defined outside the package loads
from the config (`episodes.domains`) without registration code.
"""

from rl_post.envs import specs
from rl_post.envs.base import Env
from rl_post.envs.domains.base import EnvDomain
from rl_post.envs.domains.data_questions import DataQuestions
from rl_post.envs.domains.fs_chores import FsChores
from rl_post.envs.domains.repo_repair import RepoRepair

# The built-in domains, name -> instance (domains are stateless).
DOMAINS: dict = {d.name: d for d in (RepoRepair(), DataQuestions(), FsChores())}


def check_domain_class(cls, where: str):
  """Raises ValueError, naming `where`, unless `cls` is a usable EnvDomain subclass."""
  if not (isinstance(cls, type) and issubclass(cls, EnvDomain)):
    raise ValueError(f"env domain {where!r} is not an EnvDomain subclass "
                     "(rl_post.envs.domains.EnvDomain)")
  if getattr(cls, "__abstractmethods__", None):
    raise ValueError(f"env domain {where!r} does not define "
                     f"{', '.join(sorted(cls.__abstractmethods__))}")
  if not isinstance(cls.name, str) or not cls.name:
    raise ValueError(f"env domain {where!r} must set name to a non-empty str, got {cls.name!r}")
  if not (isinstance(cls.env_class, type) and issubclass(cls.env_class, Env)):
    raise ValueError(f"env domain {where!r} must set env_class to an Env subclass, "
                     f"got {cls.env_class!r}")


def is_known(spec: str) -> bool:
  return spec in DOMAINS or ":" in spec


def make_domain(spec: str) -> EnvDomain:
  """The domain named by `spec`: a registered name or "module:Class"."""
  if not isinstance(spec, str):
    raise ValueError(f"an env domain is a name or 'module:Class', got {spec!r}")
  if ":" not in spec:
    if spec not in DOMAINS:
      raise ValueError(f"unknown env domain {spec!r}; registered: {available()} "
                       "(or use 'module:Class')")
    return DOMAINS[spec]
  cls = specs.import_class(spec, "env domain")
  check_domain_class(cls, spec)
  return cls()


def make_env(spec: str, **kwargs) -> Env:
  """A fresh environment of the domain `spec` (`Env` keyword arguments)."""
  return make_domain(spec).make_env(**kwargs)


def available() -> list:
  return sorted(DOMAINS)
