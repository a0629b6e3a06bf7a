"""An env domain from outside the package (the worked example of docs/envs.md).

    c.episodes.domains = ("tests.envs.word_hunt:WordHunt",)

The work dir holds `log.txt`, lines of random words; the task asks how
many lines contain a given word. The answer is counted on the host from
the generated lines and compared with the submitted one. The domain offers
the outside tool `count` (tests/envs/count_tool.py) by "module:Class".
"""

import re

from rl_post.envs import protocol
from rl_post.envs.base import Env
from rl_post.envs.domains import EnvDomain
from rl_post.envs.tools import Workspace
from rl_post.tasks.base import Task

WORDS = ("error", "warning", "disk", "cache", "retry", "socket", "timeout", "worker")


class WordHuntEnv(Env):
  tools = ("tests.envs.count_tool:CountLines", "submit")

  def initial_workspace(self, task):
    return Workspace(files={"log.txt": task.metadata["log"].encode()})

  def verification_request(self):
    return None  # scored on the host: the answer is a number

  def score(self, result, sandbox=None):
    return float((self.workspace.submitted or "").strip() == self.task.target)


class WordHunt(EnvDomain):
  name = "word_hunt"
  env_class = WordHuntEnv

  def generate(self, rng, difficulty):
    lines = [" ".join(rng.choice(WORDS, size=3)) for _ in range(4 + 4 * difficulty)]
    word = str(rng.choice(WORDS))
    count = sum(word in line.split() for line in lines)
    return Task(task_id=f"word_hunt-{difficulty}-{int(rng.integers(1 << 30))}",
                domain=self.name, difficulty=difficulty, target=str(count),
                prompt=f"How many lines of log.txt in your work dir contain the word "
                       f"{word!r}? Submit the number.",
                metadata={"log": "\n".join(lines) + "\n", "word": word})

  def oracle_turn(self, task, observations):
    if len(observations) == 1:
      return protocol.format_call("count", {"word": task.metadata["word"], "path": "log.txt"})
    number = re.search(r"\d+", observations[-1].split(protocol.RESPONSE_OPEN)[-1]).group(0)
    return protocol.format_call("submit", {"answer": number})
