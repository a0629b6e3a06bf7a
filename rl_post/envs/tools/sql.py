"""`sql`: SQLite statements on the episode's copy of its database (`db.sqlite`)."""

from rl_post.envs.tools.base import Tool
from rl_post.sandbox import RunRequest

DB_FILE = "db.sqlite"


class Sql(Tool):
  name = "sql"
  arguments = {"query": (str, True)}
  description = ('sql {"query": str}: runs SQLite statements on the episode\'s database; rows '
                 "of the last query are printed as JSON lines")
  examples = ({"query": "SELECT name FROM sqlite_master"},)

  def request(self, arguments, workspace, *, timeout_s, memory_mb):
    files = {DB_FILE: workspace.db} if workspace.db is not None else {}
    return RunRequest(arguments["query"], "sql", files=files, timeout_s=timeout_s,
                      memory_mb=memory_mb)

  def apply(self, arguments, workspace, result):
    """Committed writes persist for this episode."""
    if DB_FILE in result.files:
      workspace.db = result.files[DB_FILE]
    return ""
