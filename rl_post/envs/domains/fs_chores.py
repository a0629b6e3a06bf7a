"""File-system chores, verified by the final state of the work dir.

The work dir holds logs, temporary files, a CSV and notes; the chore is a
few of: move every `.log` file into `logs/`, delete every `.tmp` file,
write the number of data rows of `data.csv` to `count.txt`, rename
`notes.txt` to `NOTES.md`. The reward is 1 iff the final files (names and
bytes; `count.txt` compared after stripping whitespace) equal the expected
ones, computed on the host from the initial files.
"""

import numpy as np

from rl_post.envs import protocol
from rl_post.envs.base import Env
from rl_post.envs.domains.base import EnvDomain
from rl_post.envs.tools import Workspace
from rl_post.tasks.base import Task

NAME = "fs_chores"
WORDS = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "zeta", "rho")
CHORES = {
    "logs": ("move every .log file in the top-level directory into a directory logs/ "
             "(same file names)", "mkdir -p logs && for f in *.log; do mv \"$f\" logs/; done"),
    "tmp": ("delete every .tmp file", "rm -f -- *.tmp"),
    "count": ("write the number of data rows of data.csv (lines after the header) to "
              "count.txt", "echo $(( $(wc -l < data.csv) - 1 )) > count.txt"),
    "notes": ("rename notes.txt to NOTES.md", "mv notes.txt NOTES.md"),
}


def _initial_files(rng):
  names = rng.choice(WORDS, size=6, replace=False)
  files = {}
  for i, name in enumerate(names):
    ext = ".log" if i < 3 else ".tmp"
    files[f"{name}{ext}"] = "".join(f"{name} line {j}\n" for j in range(int(rng.integers(1, 4))))
  rows = int(rng.integers(3, 12))
  files["data.csv"] = "id,value\n" + "".join(f"{j},{int(rng.integers(100))}\n" for j in range(rows))
  files["notes.txt"] = f"remember {rng.choice(WORDS)}\n"
  files["keep/readme.txt"] = "do not touch\n"
  return files


def expected_files(files, chores):
  out = dict(files)
  for chore in chores:
    if chore == "logs":
      out = {(f"logs/{k}" if "/" not in k and k.endswith(".log") else k): v
             for k, v in out.items()}
    elif chore == "tmp":
      out = {k: v for k, v in out.items() if not ("/" not in k and k.endswith(".tmp"))}
    elif chore == "count":
      out["count.txt"] = str(out["data.csv"].count("\n") - 1)
    elif chore == "notes":
      out["NOTES.md"] = out.pop("notes.txt")
  return out


class FsChoresEnv(Env):
  tools = ("bash", "submit")

  def initial_workspace(self, task):
    return Workspace(files={k: v.encode() for k, v in task.metadata["files"].items()})

  def verification_request(self):
    return None

  def score(self, result, sandbox=None):
    got = self.workspace.files
    want = self.task.target
    if set(got) != set(want):
      return 0.0
    for name, text in want.items():
      data = got[name].decode("utf-8", "replace")
      if (data.strip() if name == "count.txt" else data) != text:
        return 0.0
    return 1.0


class FsChores(EnvDomain):
  """File-system chores checked on the final work dir (tools: bash, submit)."""
  name = NAME
  env_class = FsChoresEnv

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    if difficulty not in (1, 2, 3):
      raise ValueError(f"{NAME}: difficulty must be 1, 2 or 3, got {difficulty!r}")
    files = _initial_files(rng)
    chores = [str(c) for c in rng.choice(sorted(CHORES), size=difficulty + 1, replace=False)]
    steps = "".join(f"- {CHORES[c][0]}\n" for c in chores)
    prompt = (f"Your work dir holds some files. Do these chores, then call submit:\n{steps}"
              "Leave every other file as it is.")
    return Task(task_id=f"{NAME}-{difficulty}-{int(rng.integers(1 << 30))}", domain=NAME,
                prompt=prompt, difficulty=difficulty, target=expected_files(files, chores),
                metadata={"files": files, "chores": chores})

  def oracle_turn(self, task: Task, observations: list) -> str:
    """ls, then one bash script doing the chores, then check, then submit."""
    script = " && ".join(CHORES[c][1] for c in task.metadata["chores"])
    turns = [protocol.format_call("bash", {"command": "ls -R"}),
             protocol.format_call("bash", {"command": script}),
             protocol.format_call("bash", {"command": "ls -R; cat count.txt 2>/dev/null; true"}),
             protocol.format_call("submit", {})]
    return "I will do the chores.\n" + turns[min(len(observations) - 1, len(turns) - 1)]
