"""Checks that an entry point can write where it was told to, before any work.

A path that is a file where a folder is wanted (or the reverse), a folder
that cannot be created, or a read-only mount is a `ConfigError` naming the
flag or config field the path came from, raised before a run spends time.
"""

import os
import tempfile

from rl_post.errors import ConfigError


def ensure_workdir(workdir: str, flag: str = "--workdir") -> str:
  """Creates `workdir` if needed and checks that files can be written in it.

  Raises:
    ConfigError: naming `flag`, when the path is a file, cannot be created or
      is not writable (checked by writing, so read-only mounts count too).
  """
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(flag, workdir, "is a file, not a directory")
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise ConfigError(flag, workdir, f"cannot be created ({e.strerror})") from None
  try:
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise ConfigError(flag, workdir, f"is not writable ({e.strerror})") from None
  return workdir


def ensure_output_file(path: str, flag: str) -> str:
  """Checks that a file can be written at `path` (its folder is created if needed).

  Raises:
    ConfigError: naming `flag`, when `path` is a directory or its folder cannot be
      created or written.
  """
  if os.path.isdir(path):
    raise ConfigError(flag, path, "is a directory; name the file to write")
  folder = os.path.dirname(os.path.abspath(path))
  try:
    ensure_workdir(folder, flag)
  except ConfigError as e:
    raise ConfigError(flag, path, f"its folder {folder!r} {e.problem}") from None
  return path
