"""`bash`: a script run in the episode's work dir; the files it leaves persist."""

from rl_post.envs.tools.base import Tool
from rl_post.sandbox import RunRequest


class Bash(Tool):
  name = "bash"
  arguments = {"command": (str, True)}
  description = ('bash {"command": str}: runs a bash script in the work dir; files persist '
                 "across this episode's calls")
  examples = ({"command": "ls"}, {"command": "cat README.md"})

  def request(self, arguments, workspace, *, timeout_s, memory_mb):
    return RunRequest(arguments["command"], "bash", files=workspace.files, timeout_s=timeout_s,
                      memory_mb=memory_mb)

  def apply(self, arguments, workspace, result):
    """The files the run left become the work dir; the ones it could not return are named."""
    workspace.files = dict(result.files)
    dropped = result.files_omitted
    return f"[not kept in the work dir: {', '.join(dropped[:10])}]" if dropped else ""
