"""`submit`: ends the episode with the model's answer (host-side, no sandbox run)."""

from rl_post.envs.tools.base import CallOutcome, Tool


class Submit(Tool):
  name = "submit"
  arguments = {"answer": (str, False)}
  description = 'submit {"answer": str}: ends the episode with your answer'
  examples = ({"answer": "42"},)
  sandboxed = False

  def answer(self, arguments, workspace):
    workspace.submitted = arguments.get("answer", "")
    return CallOutcome(self.name, "submitted", None, submitted=True)
