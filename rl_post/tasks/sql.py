"""SQL: answer a question about a generated SQLite database with one query.

The generator builds a small company database (departments, employees,
projects) and a question from a template whose gold query runs here, on
the host, against the same rows (our own SQL on our own data). The model's
query runs in the sandbox through a fixed driver on a copy of the database
file: the query is data there (a file), never code, and the connection
allows only reads (an authorizer permits SELECT, reads, functions other
than load_extension, and recursive CTEs; so ATTACH, PRAGMA and writes are
denied), one statement, a bounded number of VM steps (recursive bombs are
interrupted) and at most MAX_ROWS rows. Rows come back as JSON under a
per-run nonce and are compared here: as multisets unless the question asks
for an order, numbers within 1e-6.
"""

import json
import secrets
import sqlite3

import numpy as np

from rl_post.sandbox import ExecResult, RunRequest
from rl_post.tasks import sql_questions
from rl_post.tasks.base import Task, Verdict
from rl_post.tasks.sandboxed import Prepared, SandboxedDomain

MAX_ROWS = 10_000
MAX_VM_STEPS = 20_000_000

_DRIVER = r'''
import json, os, sqlite3
nonce, max_rows, max_calls = %(nonce)r, %(max_rows)d, %(max_calls)d
ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
           sqlite3.SQLITE_RECURSIVE}

def authorize(action, arg1, arg2, db, source):
  if action not in ALLOWED:
    return sqlite3.SQLITE_DENY
  if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
    return sqlite3.SQLITE_DENY
  return sqlite3.SQLITE_OK

calls = [0]
def progress():
  calls[0] += 1
  return calls[0] > max_calls

def enc(v):
  return {"B": v.hex()} if type(v) is bytes else v

out = {"nonce": nonce}
try:
  with open("query.sql", encoding="utf-8") as f:
    query = f.read()
  conn = sqlite3.connect("file:db.sqlite?mode=ro", uri=True)
  conn.set_authorizer(authorize)
  conn.set_progress_handler(progress, 1000)
  conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 20)
  cur = conn.execute(query)
  if cur.description is None:
    raise ValueError("the statement returns no rows")
  rows = cur.fetchmany(max_rows + 1)
  if len(rows) > max_rows:
    raise ValueError("more than %%d rows" %% max_rows)
  out["rows"] = [[enc(v) for v in row] for row in rows]
except Exception as e:
  out["error"] = ("%%s: %%s" %% (type(e).__name__, e))[:300]
fd = os.open(".rl_post_sql_" + nonce, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, json.dumps(out).encode())
os.close(fd)
'''


def database_bytes(tables: dict) -> bytes:
  """The SQLite file for a task's tables ({name: {"ddl", "rows"}})."""
  conn = sqlite3.connect(":memory:")
  for name, table in tables.items():
    conn.execute(table["ddl"])
    if table["rows"]:
      marks = ", ".join("?" * len(table["rows"][0]))
      conn.executemany(f"INSERT INTO {name} VALUES ({marks})", table["rows"])
  conn.commit()
  data = conn.serialize()
  conn.close()
  return data


def gold_rows(tables: dict, query: str) -> list[list]:
  """Runs our own gold query on the host (trusted SQL on trusted data)."""
  conn = sqlite3.connect(":memory:")
  conn.deserialize(database_bytes(tables))
  rows = [list(r) for r in conn.execute(query).fetchall()]
  conn.close()
  return rows


def _norm_value(v):
  if type(v) in (int, float):
    return ("n", round(float(v), 6))
  if type(v) is str:
    return ("s", v)
  if v is None:
    return ("z", "")
  if type(v) is dict and set(v) == {"B"} and type(v["B"]) is str:
    return ("b", v["B"])
  raise ValueError(f"unexpected value of type {type(v).__name__}")


def rows_match(got: list, gold: list, ordered: bool) -> bool:
  """Result sets equal as lists (ordered) or multisets, numbers to 1e-6."""
  if type(got) is not list or len(got) != len(gold):
    return False
  if any(type(r) is not list for r in got):
    return False
  got_n = [tuple(_norm_value(v) for v in r) for r in got]
  gold_n = [tuple(_norm_value(v) for v in r) for r in gold]
  if not ordered:
    got_n, gold_n = sorted(got_n, key=repr), sorted(gold_n, key=repr)
  return got_n == gold_n


class Sql(SandboxedDomain):
  """Generated SQLite databases and questions with gold result sets."""

  name = "sql"

  def __init__(self, timeout_s: float = 5.0, memory_mb: int = 256):
    if not timeout_s > 0 or not memory_mb > 0:
      raise ValueError(f"sql: timeout_s and memory_mb must be > 0, got {timeout_s}, {memory_mb}")
    self.difficulty_levels = sql_questions.LEVELS
    self.timeout_s = float(timeout_s)
    self.memory_mb = int(memory_mb)
    self._db_cache: dict[str, bytes] = {}

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    tables = sql_questions.make_tables(rng, difficulty)
    question, query, ordered = sql_questions.make_question(rng, difficulty, tables)
    schema = "\n".join(t["ddl"] + ";" for t in tables.values())
    prompt = (f"SQLite database schema:\n{schema}\n\nWrite one SQLite query that answers: "
              f"{question}\n{self.code_prompt('SQL')}")
    index = int(rng.integers(1 << 31))
    return Task(task_id=f"sql/{difficulty}/{index}", domain=self.name, prompt=prompt,
                difficulty=difficulty, target=gold_rows(tables, query),
                metadata={"tables": tables, "gold_query": query, "ordered": ordered})

  def demonstration(self, task: Task) -> str:
    return self.code_response("Select exactly the requested columns.",
                           task.metadata["gold_query"], "sql")

  def prepare(self, task: Task, completion: str) -> Prepared | Verdict:
    query = self.program(completion)
    if isinstance(query, Verdict):
      return query
    nonce = secrets.token_hex(16)
    driver = _DRIVER % {"nonce": nonce, "max_rows": MAX_ROWS,
                        "max_calls": MAX_VM_STEPS // 1000}
    files = {"db.sqlite": self._database(task), "query.sql": query}
    request = RunRequest(driver, files=files, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
    return Prepared(request, nonce, query)

  def judge(self, task: Task, prepared: Prepared, result: ExecResult,
            format_ok: bool) -> Verdict:
    record = result.files.get(".rl_post_sql_" + prepared.state)
    if record is None:
      return Verdict(0.0, format_ok, prepared.answer, f"no result (status={result.status})")
    parsed = json.loads(record.decode("utf-8"))
    if type(parsed) is not dict or parsed.get("nonce") != prepared.state:
      return Verdict(0.0, format_ok, prepared.answer, "result record does not match this run")
    if "error" in parsed:
      return Verdict(0.0, format_ok, prepared.answer, f"query failed: {parsed['error']}"[:300])
    good = rows_match(parsed.get("rows"), task.target, task.metadata["ordered"])
    return Verdict(float(good), format_ok, prepared.answer, None if good else "wrong result")

  def _database(self, task: Task) -> bytes:
    key = json.dumps(task.metadata["tables"], sort_keys=True)  # ids alone could collide
    data = self._db_cache.get(key)
    if data is None:
      if len(self._db_cache) >= 256:
        self._db_cache.clear()
      data = self._db_cache[key] = database_bytes(task.metadata["tables"])
    return data
