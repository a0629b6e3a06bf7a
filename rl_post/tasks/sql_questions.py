"""Database and question generators for the sql domain.

Tables are plain data ({name: {"ddl", "rows"}}) so tasks stay
JSON-serialisable. Each question template returns (question, gold query,
ordered): the gold query is ours and runs only on the host. Orderings are
total (ties broken by name), so an ordered gold result is unique.
"""

import numpy as np

LEVELS = (1, 2, 3, 4)
_NAMES = ("Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gia", "Hugo", "Ines", "Jon", "Kai",
          "Lea", "Milo", "Nia", "Omar", "Pia", "Quin", "Rosa", "Sam", "Tara", "Uma", "Vic",
          "Wes", "Xena", "Yara", "Zed", "Alba", "Bruno", "Cara", "Dev", "Elif", "Femi")
_CITIES = ("Oslo", "Lima", "Pune", "Kyoto", "Accra")
_DEPTS = ("Sales", "Research", "Support", "Legal", "Finance", "Design")


def make_tables(rng: np.random.Generator, difficulty: int) -> dict:
  num_depts = 2 + difficulty
  num_emps = 6 + 6 * difficulty
  depts = [[i + 1, name, int(rng.integers(50, 500)) * 1000]
           for i, name in enumerate(rng.choice(_DEPTS, size=num_depts, replace=False))]
  names = rng.choice(_NAMES, size=num_emps, replace=False)
  salaries = rng.choice(np.arange(30, 200), size=num_emps, replace=False) * 1000
  emps = [[i + 1, str(names[i]), int(rng.integers(1, num_depts + 1)), int(salaries[i]),
           int(rng.integers(20, 66)), str(rng.choice(_CITIES[:2 + difficulty]))]
          for i in range(num_emps)]
  projects = [[i + 1, f"P{i + 1}", int(rng.integers(1, num_depts + 1)),
               int(rng.integers(1, 100)) * 500] for i in range(2 * num_depts)]
  return {
      "departments": {"ddl": "CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT, "
                             "budget INTEGER)", "rows": [[d[0], str(d[1]), d[2]] for d in depts]},
      "employees": {"ddl": "CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT, "
                           "dept_id INTEGER REFERENCES departments(id), salary INTEGER, "
                           "age INTEGER, city TEXT)", "rows": emps},
      "projects": {"ddl": "CREATE TABLE projects (id INTEGER PRIMARY KEY, name TEXT, "
                          "dept_id INTEGER REFERENCES departments(id), cost INTEGER)",
                   "rows": projects},
  }


def _pick(rng, values):
  return values[int(rng.integers(len(values)))]


def make_question(rng: np.random.Generator, difficulty: int, tables: dict):
  emps = tables["employees"]["rows"]
  city = _pick(rng, [e[5] for e in emps])
  age = int(np.median([e[4] for e in emps])) + int(rng.integers(-3, 4))
  dept = _pick(rng, tables["departments"]["rows"])[1]
  k = int(rng.integers(2, 5))
  n = int(rng.integers(1, 4))
  templates = {
      1: [(f"What are the names of the employees who live in {city}?",
           f"SELECT name FROM employees WHERE city = '{city}'", False),
          (f"How many employees are older than {age}?",
           f"SELECT COUNT(*) FROM employees WHERE age > {age}", False),
          ("What is the highest salary of any employee?",
           "SELECT MAX(salary) FROM employees", False)],
      2: [(f"List the names of the {k} highest-paid employees, highest salary first.",
           f"SELECT name FROM employees ORDER BY salary DESC LIMIT {k}", True),
          (f"What is the average salary of the employees who live in {city}?",
           f"SELECT AVG(salary) FROM employees WHERE city = '{city}'", False),
          (f"List the name and age of every employee who lives in {city}, ordered by age "
           "(youngest first), then by name.",
           f"SELECT name, age FROM employees WHERE city = '{city}' ORDER BY age, name", True)],
      3: [("For each city, how many employees live there? Return the city and the count.",
           "SELECT city, COUNT(*) FROM employees GROUP BY city", False),
          (f"What are the names of the employees who work in the {dept} department?",
           "SELECT e.name FROM employees e JOIN departments d ON e.dept_id = d.id "
           f"WHERE d.name = '{dept}'", False),
          ("What is the total salary of each department that has employees? Return the "
           "department name and the total.",
           "SELECT d.name, SUM(e.salary) FROM employees e JOIN departments d "
           "ON e.dept_id = d.id GROUP BY d.id", False)],
      4: [(f"Which departments have more than {n} employees? Return their names.",
           "SELECT d.name FROM departments d JOIN employees e ON e.dept_id = d.id "
           f"GROUP BY d.id HAVING COUNT(*) > {n}", False),
          ("For each department that has projects, return its name and the total cost of "
           "its projects, ordered by total cost (largest first), then by name.",
           "SELECT d.name, SUM(p.cost) AS total FROM departments d JOIN projects p "
           "ON p.dept_id = d.id GROUP BY d.id ORDER BY total DESC, d.name", True),
          ("What are the names of the employees who earn more than the average salary of "
           "their own department?",
           "SELECT e.name FROM employees e WHERE e.salary > (SELECT AVG(o.salary) FROM "
           "employees o WHERE o.dept_id = e.dept_id)", False)],
  }
  return _pick(rng, templates[difficulty])
