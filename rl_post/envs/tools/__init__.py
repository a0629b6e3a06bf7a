"""The tools: python, bash, sql and submit, run in the strict sandbox; the `Tool` seam.

One module per tool (`python.py`, `bash.py`, `sql.py`, `submit.py`), each a
`Tool` subclass (`base.py`: argument schema, description, request builder,
result handling); `registry.py` resolves a tool by name or by
"module:Class", so a tool defined elsewhere is one module plus one config
line (`episodes.tools`, or an `Env`'s `tools`). `calls.py` plans and
finishes calls for any tool. Every tool builds its run out of the
sandbox's generic run kinds (python, bash, sql); the sandbox knows no tool.

Persistence. The sandbox gives every run a fresh tmpfs work dir and returns
the regular files left in it (`ExecResult.files`); it has no persistent
work dir. The episode's work dir is therefore carried host-side in
`Workspace.files`: every bash call gets the episode's files as its input
files and the files it leaves become the new state. What persists is
exactly the regular files of the work dir (names, bytes); empty
directories, symlinks and permission bits do not, nor does anything
outside the work dir. Files beyond the sandbox's `max_files_out` /
`max_files_out_mb` are dropped and reported to the model. No other
episode's files are ever sent to a run, so work dirs cannot leak across
episodes. `python` runs on a copy of the files and its changes are
discarded (stateless); `sql` runs on the episode's copy of the database
(`db.sqlite`), and committed writes persist for that episode only.
"""

from rl_post.envs.tools.base import (REJECTED, CallOutcome, Tool, ToolLimits, Workspace,
                                     output_text, status_kind)
from rl_post.envs.tools.calls import PlannedCall, finish_call, plan_call, run_planned
from rl_post.envs.tools.python import PYTHON_LAUNCH
from rl_post.envs.tools.registry import available, is_known, make_tool, toolset
from rl_post.envs.tools.sql import DB_FILE

__all__ = ["Tool", "ToolLimits", "Workspace", "CallOutcome", "PlannedCall", "plan_call",
           "finish_call", "run_planned", "make_tool", "toolset", "available",
           "is_known", "output_text", "status_kind", "DB_FILE", "PYTHON_LAUNCH", "REJECTED"]
