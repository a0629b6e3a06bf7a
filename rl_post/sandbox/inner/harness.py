"""What the candidate process D does once confined: run python, bash or SQL.

Python runs in the pre-imported interpreter (no exec of a new interpreter):
the source is compiled and executed as ``__main__``; SystemExit, uncaught
exceptions, non-daemon threads and atexit handlers behave like ``python
main.py``. Bash is exec'd on a script file. SQL runs through sqlite3 on
``db.sqlite`` in the work dir (a copy of the input file) or in memory
when there is none, and
prints the rows of the last statement that returned rows as JSON lines.
"""

import atexit
import builtins
import json
import os
import sys
import threading
import traceback

MEMORY_FLAG = b"M"


def _exit_code(exc):
  code = exc.code
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xFF
  try:
    print(code, file=sys.stderr)
  except Exception:  # pylint: disable=broad-except
    pass
  return 1


def _finish(code, flag_fd):
  """Interpreter shutdown as python does it, then a hard exit."""
  try:
    threading._shutdown()  # pylint: disable=protected-access
  except BaseException:  # pylint: disable=broad-except
    pass
  try:
    atexit._run_exitfuncs()  # pylint: disable=protected-access
  except BaseException:  # pylint: disable=broad-except
    pass
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except BaseException:  # pylint: disable=broad-except
      pass
  del flag_fd
  os._exit(code)


def _report_memory(flag_fd):
  try:
    os.write(flag_fd, MEMORY_FLAG)
  except OSError:
    pass


def run_python(source, flag_fd, filename="main.py"):
  sys.argv = [filename]
  namespace = {"__name__": "__main__", "__builtins__": builtins,
               "__file__": filename, "__doc__": None}
  sys.modules["__main__"].__dict__.clear()
  sys.modules["__main__"].__dict__.update(namespace)
  code = 0
  try:
    compiled = compile(source, filename, "exec", dont_inherit=True)
    exec(compiled, sys.modules["__main__"].__dict__)  # pylint: disable=exec-used
  except SystemExit as e:
    code = _exit_code(e)
  except MemoryError:
    _report_memory(flag_fd)
    code = 1
    try:
      sys.stderr.write("MemoryError\n")
    except BaseException:  # pylint: disable=broad-except
      pass
  except BaseException:  # pylint: disable=broad-except
    code = 1
    try:
      traceback.print_exc()
    except BaseException:  # pylint: disable=broad-except
      pass
  _finish(code, flag_fd)


def run_bash(source, flag_fd):
  del flag_fd
  path = "/tmp/.main.sh"
  data = source.encode("utf-8", "surrogateescape") if isinstance(
      source, str) else source
  with open(path, "wb") as f:
    f.write(data)
  os.execve("/bin/bash", ["bash", "--noprofile", "--norc", path],
            dict(os.environ))


def _statements(script):
  import sqlite3  # pylint: disable=g-import-not-at-top
  pending = ""
  for piece in script.split(";"):
    pending += piece + ";"
    if sqlite3.complete_statement(pending):
      if pending.strip(" \t\r\n;"):
        yield pending
      pending = ""
  if pending.strip(" \t\r\n;"):
    yield pending


def run_sql(source, flag_fd, db_path):
  if isinstance(source, bytes):
    source = source.decode("utf-8", "replace")
  code = 0
  try:
    import sqlite3  # pylint: disable=g-import-not-at-top
    if "\x00" in source:
      raise ValueError("SQL source contains a NUL byte")
    conn = sqlite3.connect(db_path if os.path.exists(db_path) else ":memory:")
    rows = None
    for statement in _statements(source):
      cur = conn.execute(statement)
      if cur.description is not None:
        rows = cur.fetchall()
    conn.commit()
    for row in rows or ():
      print(json.dumps([v if not isinstance(v, bytes) else v.hex()
                        for v in row]))
  except MemoryError:
    _report_memory(flag_fd)
    code = 1
  except Exception as e:  # pylint: disable=broad-except
    print(f"{type(e).__name__}: {e}", file=sys.stderr)
    code = 1
  _finish(code, flag_fd)


def run(language, source, flag_fd, work_dir):
  if language == "python":
    run_python(source, flag_fd)
  elif language == "bash":
    run_bash(source, flag_fd)
  elif language == "sql":
    run_sql(source, flag_fd, os.path.join(work_dir, "db.sqlite"))
  os._exit(127)
