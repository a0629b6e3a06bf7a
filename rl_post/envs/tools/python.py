"""`python`: a Python 3 program run on a copy of the work dir; its changes are discarded."""

from rl_post.envs.tools.base import Tool
from rl_post.sandbox import RunRequest

PYTHON_LAUNCH = "exec python3 -"


class Python(Tool):
  name = "python"
  arguments = {"code": (str, True)}
  description = ('python {"code": str}: runs a Python 3 program (stdlib only) on a copy of '
                 "the work dir; its changes are discarded")
  examples = ({"code": "print(1 + 1)"},)

  def request(self, arguments, workspace, *, timeout_s, memory_mb):
    # `python3 -` in the work dir (program on stdin), as a model expects from
    # running a script there: the work dir's packages are importable.
    return RunRequest(PYTHON_LAUNCH, "bash", stdin=arguments["code"], files=workspace.files,
                      timeout_s=timeout_s, memory_mb=memory_mb)
