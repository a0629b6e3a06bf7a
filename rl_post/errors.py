"""User errors: a bad config value or a missing input, not a bug.

Entry points (`rl_post.cli.run`) print these as one line,
`error: <field>=<value>: <what is wrong>`, and exit with status 2; every
other exception is a bug and keeps its traceback.

Both classes also derive from the built-in exception a caller would expect
(`ValueError`, `FileNotFoundError`), so library code and tests that catch
those keep working.
"""

from typing import Any


class UserError(Exception):
  """A problem with what the user passed in, named by its field.

  Attributes:
    field: the config field or flag, e.g. "rl.init_from" or "--workdir".
    value: the offending value.
    problem: what is wrong with it, in words.
  """

  def __init__(self, field: str, value: Any, problem: str):
    self.field, self.value, self.problem = field, value, problem
    super().__init__(f"{field}={value!r}: {problem}")


class ConfigError(UserError, ValueError):
  """A config field or flag has a value that cannot work."""


class MissingInputError(UserError, FileNotFoundError):
  """A path named in the config or on the command line does not hold what it should."""
