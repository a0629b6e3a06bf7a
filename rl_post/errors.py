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


def one_line(text: Any) -> str:
  """`text` with every run of whitespace (newlines too) as one space."""
  return " ".join(str(text).split())


def root_cause(error: BaseException) -> BaseException:
  """The innermost exception `error` was raised from (following __cause__, else
  __context__): e.g. tensorstore's own error under orbax's wrappers."""
  seen = set()
  while id(error) not in seen and (error.__cause__ or error.__context__) is not None:
    seen.add(id(error))
    error = error.__cause__ or error.__context__
  return error


# What loaders of model, checkpoint and tokenizer files raise on a file that is
# truncated, garbled or of the wrong kind (tensorstore and sentencepiece raise
# ValueError and RuntimeError; struct, the GGUF and safetensors readers the rest).
UNREADABLE_FILE_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError, RuntimeError,
                          EOFError, UnicodeDecodeError)


class reading:  # noqa: N801 (used as a context manager, like `open`)
  """Turns a loader's exception on a user-named input into a MissingInputError.

      with errors.reading("rl.init_from", path):
        params = load_params(path, ...)

  A `UserError` raised inside passes through unchanged; any exception in
  `UNREADABLE_FILE_ERRORS` becomes `MissingInputError(field, path, "cannot be
  read: <type>: <message>")`, chained to the original.
  """

  def __init__(self, field: str, path: Any, what: str = "cannot be read"):
    self.field, self.path, self.what = field, path, what

  def __enter__(self):
    return self

  def __exit__(self, kind, exc, tb):
    if exc is None or isinstance(exc, UserError):
      return False
    if isinstance(exc, UNREADABLE_FILE_ERRORS):
      detail = one_line(exc)[:300] or "no message"
      raise MissingInputError(self.field, self.path,
                              f"{self.what} ({type(exc).__name__}: {detail})") from exc
    return False
