"""A tool from outside the package (the worked example of docs/envs.md).

    c.episodes.tools = ("tests.envs.count_tool:CountLines",)

`count {"word": str, "path": str}` answers how many lines of a work-dir
file contain a word, with `grep -c -w -F` run in the sandbox (a bash run:
the sandbox's generic kinds are enough). It keeps nothing (a stateless
tool, like `python`) and reports the count in words.
"""

import shlex

from rl_post.envs.tools import Tool, output_text
from rl_post.sandbox import RunRequest


class CountLines(Tool):
  name = "count"
  arguments = {"word": (str, True), "path": (str, True)}
  description = ('count {"word": str, "path": str}: the number of lines of a file in the '
                 "work dir that contain the word")
  examples = ({"word": "error", "path": "log.txt"},)

  def request(self, arguments, workspace, *, timeout_s, memory_mb):
    # grep exits 1 when no line matches: still an answer (0), not a failure
    command = (f"grep -c -w -F -e {shlex.quote(arguments['word'])} -- "
               f"{shlex.quote(arguments['path'])} || [ $? -eq 1 ]")
    return RunRequest(command, "bash", files=workspace.files, timeout_s=timeout_s,
                      memory_mb=memory_mb)

  def output(self, arguments, result):
    if not result.ok:
      return output_text(result)
    return f"{result.stdout.strip()} lines of {arguments['path']} contain {arguments['word']!r}"
