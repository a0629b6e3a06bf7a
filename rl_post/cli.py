"""The wrapper every `experiments/*.py` entry point runs its `main` in.

    if __name__ == "__main__":
      cli.run(main)

User errors print one line and exit with status 2:

    error: rl.num_generations=1: must be >= 2 (group advantages need a group), got 1
    error: --workdir='/tmp/x': is a file, not a directory

A user error is an `rl_post.errors.UserError`, or a `ValueError` whose
message starts with the dotted path of a field of the loaded `--config`
(the form every config section's validation uses,
`rl_post.config_sections`). Anything else is a bug and keeps its traceback.
"""

import ast
import re
import sys
from collections.abc import Mapping
from typing import Any, Callable

from absl import app, flags

from rl_post.errors import ConfigError, UserError, one_line, root_cause
from rl_post.output_paths import ensure_workdir
from rl_post.training import compile_cache, host_memory
from rl_post.training.run import pretrained_path

EXIT_USER_ERROR = 2
_FIELD_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_UNKNOWN_RE = re.compile(r"unknown field\(s\) (\[[^\]]*\])")
# What follows the field in a validation message: "rl: ...", "rl.x=3: ..." or
# "rl.x must ..."; a message that merely starts with a section's name is not one.
_FIELD_THEN = re.compile(r"[:=]|\s+(must|should|needs?|is|are|has|have|cannot|can|requires|"
                         r"does|do|holds|expects|exceeds|contains)\b")
_MISSING = object()


def _lookup(config: Any, path: str) -> Any:
  node = config
  for part in path.split("."):
    if not isinstance(node, Mapping) and not hasattr(node, "keys"):
      return _MISSING
    if part not in node:
      return _MISSING
    node = node[part]
  return node


def _plain(value: Any) -> Any:
  return value.to_dict() if hasattr(value, "to_dict") else value


def config_error_line(config: Any, message: str) -> str | None:
  """`<field>=<value>: <problem>` for a config validation message, else None.

  Args:
    config: the loaded config (a ConfigDict or dict), or None.
    message: a ValueError's message, e.g. "rl.clip_low must be in [0, 1), got 1.5"
      or "rl: unknown field(s) ['num_generation']; known fields: [...]".

  Returns:
    The error line without the "error: " prefix, or None when the message
    does not start with a field of `config` (then it is not a config error).
  """
  match = _FIELD_RE.match(message)
  if config is None or not match or match.group(0).split(".")[0] not in config:
    return None
  if not _FIELD_THEN.match(message[match.end():]):  # e.g. "rewards of shape (6,) ...": a bug
    return None
  path = match.group(0)
  problem = " ".join(message[match.end():].lstrip(" :").split())  # one line
  unknown = _UNKNOWN_RE.search(message)
  if unknown and _lookup(config, path) is not _MISSING:
    try:
      names = ast.literal_eval(unknown.group(1))
    except (ValueError, SyntaxError):
      names = []
    if names:
      path = f"{path}.{names[0]}"
  # The longest prefix of the path that the config holds names the value.
  parts = path.split(".")
  while parts and _lookup(config, ".".join(parts)) is _MISSING:
    parts.pop()
  value = _plain(_lookup(config, ".".join(parts)))
  if isinstance(value, Mapping):  # a whole section: the message says the rest
    return f"{path}: {problem}"
  return f"{'.'.join(parts)}={value!r}: {problem}"


def _flag_value(name: str) -> Any:
  return flags.FLAGS[name].value if name in flags.FLAGS else None


def flag_error_line(message: str) -> str:
  """`--flag=value: problem` for absl's flag parsing message.

  absl says e.g. "flag --config.rl.num_steps=abc: invalid literal for int()
  ...", "Unknown command line flag 'bogus'", or for a config file that fails
  to load, a traceback whose last line is the problem.
  """
  unknown = re.match(r"Unknown command line flag '([^']*)'", message)
  if unknown:
    return f"--{unknown.group(1)}: unknown flag"
  match = re.match(r"\s*flag (--[\w.]+)=(.*?): (.*)", message, re.S)
  if not match:
    return one_line(message)
  name, value, problem = match.groups()
  if "must have a value other than None" in problem:
    return f"{name}: is required"
  lines = [line.strip() for line in problem.strip().splitlines() if line.strip()]
  problem = lines[-1] if len(lines) > 1 else one_line(problem)  # a traceback's last line
  return f"{name}={value!r}: {problem}"


def _override_of_unknown_field(argv: list[str], error: Exception) -> str:
  """`--config.<path>=value: no field ...` for ml_collections' bare error on an override
  of a field the config lacks (its message is the field name plus a suggestion)."""
  while error.args and isinstance(error.args[0], BaseException):  # AttributeError(KeyError)
    error = error.args[0]
  text = str(error.args[0]) if error.args else ""
  key = re.match(r"\s*'([^']*)'", text)
  if not key:
    return ""
  suggestion = re.search(r'Did you mean "([^"]*)"', text)
  for arg in argv[1:]:
    match = re.match(r"(--\w+(?:\.\w+)*?\.%s(?:\.[\w.]+)?)(?:=(.*))?$"
                     % re.escape(key.group(1)), arg)
    if match:
      hint = f" (did you mean {suggestion.group(1)!r}?)" if suggestion else ""
      return (f"{match.group(1)}={match.group(2)!r}: the config has no field "
              f"{key.group(1)!r}{hint}")
  return ""


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing (`app.run`'s `flags_parser`), with a bad flag, a bad
  `--config.*` override or a config file that cannot be loaded reported as one
  line and exit status 2 (absl prints usage and exits 1)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(flag_error_line(str(e)))
  except (AttributeError, KeyError) as e:  # ml_collections: a field the config lacks
    line = _override_of_unknown_field(argv, e)
    if not line:
      raise
    fail(line)


def _loaded_config() -> Any:
  """The `--config` flag's config, or None; a file that cannot be loaded is a user error
  (ml_collections defers the failure to the first read of the flag)."""
  if "config" not in flags.FLAGS:
    return None
  try:
    config = flags.FLAGS["config"].value
    _ = config.keys() if config is not None else None  # a failed load raises on first use
    return config
  except OSError as e:
    name = getattr(flags.FLAGS["config"], "config_filename", None)
    lines = str(root_cause(e)).strip().splitlines() or [type(e).__name__]
    fail(f"--config={name!r}: cannot be loaded ({lines[-1].strip()})")


def fail(line: str):
  """Prints `error: <line>` to stderr and exits with status 2."""
  print(f"error: {line}", file=sys.stderr, flush=True)
  sys.exit(EXIT_USER_ERROR)


def guarded(main: Callable[[list[str]], Any], argv: list[str]) -> Any:
  """Runs `main(argv)`, turning user errors into one line and exit status 2; first
  turns on the persistent compilation cache (`rl_post.training.compile_cache`)."""
  config = _loaded_config()
  try:
    compile_cache.apply(config)
    if "workdir" in flags.FLAGS and flags.FLAGS["workdir"].present:
      ensure_workdir(_flag_value("workdir"))  # "" too: it names no folder
    return main(argv)
  except UserError as e:
    fail(str(e))
  except ValueError as e:
    line = config_error_line(config, str(e))
    if line is None:
      raise
    fail(line)


def run(main: Callable[[list[str]], Any]):
  """`absl.app.run(main)` with user errors reported as one line (exit 2).

  First applies the host memory policy (`rl_post.training.host_memory`:
  on XLA:CPU, freed memory is reused instead of page-faulted anew on every
  call of a compiled step), which must happen before JAX starts its backend.
  """
  try:
    host_memory.apply_policy()
  except ValueError as e:  # an unknown RL_POST_HOST_MALLOC
    fail(str(e))
  app.run(lambda argv: guarded(main, argv), flags_parser=parse_flags)


def checkpoint_or_pretrained(checkpoint: str | None, config) -> str:
  """`--checkpoint` if given, else the config's `pretrained.path` (the raw model).

  Raises:
    ConfigError: on --checkpoint when neither is set.
  """
  path = checkpoint or pretrained_path(config)
  if not path:
    raise ConfigError("--checkpoint", checkpoint, "is required: this config has no "
                      "pretrained.path to default to")
  return path
