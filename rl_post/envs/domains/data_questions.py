"""Data questions over a SQLite database that take several queries.

The database has three related tables whose names and columns are drawn
per task and not given in the prompt, so the model has to read the schema
(`sqlite_master`) before it can write the query that answers. The answer
is computed on the host from the generated rows (never by SQL), made
unique by construction, and compared with the submitted answer: exact
(case-insensitive) for names, numerically for totals.
"""

import json
import sqlite3

import numpy as np

from rl_post.envs import protocol
from rl_post.envs.base import Env
from rl_post.envs.domains.base import EnvDomain
from rl_post.envs.tools import Workspace
from rl_post.tasks.base import Task

NAME = "data_questions"
PEOPLE = ("ada", "ben", "cai", "dev", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lea")
TEAMS = ("north", "south", "east", "west", "core", "edge")
CITIES = ("oslo", "lima", "kyiv", "rome", "pune")
NAMINGS = (("staff", "teams", "orders"), ("employees", "departments", "sales"),
           ("people", "groups", "deals"))


def _rows(rng, difficulty):
  n_teams, n_people = 2 + difficulty, 4 + 2 * difficulty
  teams = [(i + 1, TEAMS[i], str(rng.choice(CITIES))) for i in range(n_teams)]
  people = [(i + 1, PEOPLE[i], int(rng.integers(1, n_teams + 1))) for i in range(n_people)]
  orders = [(i + 1, int(rng.integers(1, n_people + 1)), int(rng.integers(1, 500)),
             int(rng.choice([2023, 2024]))) for i in range(3 * n_people)]
  return teams, people, orders


def _answers(teams, people, orders, year):
  """(question kind -> answer) computed in Python; None where not unique."""
  team_of = {p[0]: p[2] for p in people}
  by_team = {t[0]: 0 for t in teams}
  for _, person, amount, y in orders:
    if y == year:
      by_team[team_of[person]] += amount
  best = sorted(by_team.items(), key=lambda kv: -kv[1])
  top_team = None if len(best) > 1 and best[0][1] == best[1][1] else teams[best[0][0] - 1][1]
  by_person = {p[0]: 0 for p in people}
  for _, person, amount, _ in orders:
    by_person[person] += amount
  ranked = sorted(by_person.items(), key=lambda kv: -kv[1])
  top_person = None if ranked[0][1] == ranked[1][1] else people[ranked[0][0] - 1][1]
  return {"top_team": top_team, "top_person": top_person, "total": sum(by_team.values())}


def _script(naming, teams, people, orders):
  t_tab, p_tab, o_tab = naming[1], naming[0], naming[2]
  lines = [f"CREATE TABLE {t_tab} (id INTEGER PRIMARY KEY, name TEXT, city TEXT);",
           f"CREATE TABLE {p_tab} (id INTEGER PRIMARY KEY, name TEXT, team_id INTEGER);",
           f"CREATE TABLE {o_tab} (id INTEGER PRIMARY KEY, person_id INTEGER, amount INTEGER, "
           "year INTEGER);"]
  lines += [f"INSERT INTO {t_tab} VALUES ({i}, '{n}', '{c}');" for i, n, c in teams]
  lines += [f"INSERT INTO {p_tab} VALUES ({i}, '{n}', {t});" for i, n, t in people]
  lines += [f"INSERT INTO {o_tab} VALUES ({i}, {p}, {a}, {y});" for i, p, a, y in orders]
  return "\n".join(lines)


def _oracle_query(kind, naming, year):
  p_tab, t_tab, o_tab = naming
  if kind == "top_team":
    return (f"SELECT t.name FROM {o_tab} o JOIN {p_tab} p ON o.person_id = p.id JOIN {t_tab} t "
            f"ON p.team_id = t.id WHERE o.year = {year} GROUP BY t.id "
            "ORDER BY SUM(o.amount) DESC LIMIT 1")
  if kind == "top_person":
    return (f"SELECT p.name FROM {o_tab} o JOIN {p_tab} p ON o.person_id = p.id GROUP BY p.id "
            "ORDER BY SUM(o.amount) DESC LIMIT 1")
  return f"SELECT SUM(amount) FROM {o_tab} WHERE year = {year}"


QUESTIONS = {
    "top_team": "Which team had the highest total order amount in {year}? Submit its name.",
    "top_person": "Which person has the highest total order amount over all years? Submit "
                  "their name.",
    "total": "What is the total order amount in {year}? Submit the number.",
}


def database_bytes(script: str) -> bytes:
  conn = sqlite3.connect(":memory:")
  try:
    conn.executescript(script)
    return conn.serialize()
  finally:
    conn.close()


def answers_match(submitted, target: str) -> bool:
  if submitted is None:
    return False
  got = submitted.strip().lower()
  try:
    return float(got) == float(target)
  except ValueError:
    return got == target.lower()


class DataQuestionsEnv(Env):
  tools = ("sql", "submit")

  def initial_workspace(self, task):
    return Workspace(files={}, db=database_bytes(task.metadata["script"]))

  def verification_request(self):
    return None

  def score(self, result, sandbox=None):
    return float(answers_match(self.workspace.submitted, self.task.target))


class DataQuestions(EnvDomain):
  """SQLite questions that need the schema first (tools: sql, submit)."""
  name = NAME
  env_class = DataQuestionsEnv

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    if difficulty not in (1, 2, 3):
      raise ValueError(f"{NAME}: difficulty must be 1, 2 or 3, got {difficulty!r}")
    while True:  # redraw until the asked answer is unique
      teams, people, orders = _rows(rng, difficulty)
      year = int(rng.choice([2023, 2024]))
      kind = str(rng.choice(sorted(QUESTIONS)))
      answer = _answers(teams, people, orders, year)[kind]
      if answer is not None:
        break
    naming = NAMINGS[int(rng.integers(len(NAMINGS)))]
    prompt = ("You have a SQLite database (tables unknown: inspect sqlite_master first). "
              + QUESTIONS[kind].format(year=year))
    return Task(task_id=f"{NAME}-{difficulty}-{int(rng.integers(1 << 30))}", domain=NAME,
                prompt=prompt, difficulty=difficulty, target=str(answer),
                metadata={"script": _script(naming, teams, people, orders), "kind": kind,
                          "oracle_query": _oracle_query(kind, naming, year)})

  def oracle_turn(self, task: Task, observations: list) -> str:
    """Reads the schema, runs the answering query, submits the value it printed."""
    turn = len(observations) - 1
    if turn == 0:
      return protocol.format_call("sql", {"query": "SELECT name, sql FROM sqlite_master"})
    if turn == 1:
      return protocol.format_call("sql", {"query": task.metadata["oracle_query"]})
    body = observations[-1].split(protocol.RESPONSE_OPEN)[-1].split(protocol.RESPONSE_CLOSE)[0]
    value = json.loads(body.strip().splitlines()[0])[0]
    return protocol.format_call("submit", {"answer": str(value)})
