"""Structured extraction: records embedded in a generated document, answered as JSON.

Each document describes customers (name, age, city, email, order id, amount,
date) in mixed prose and key-value blocks, between filler sentences. Levels:
  1. one record, three fields asked, prose only;
  2. three records, one asked by name, four fields;
  3. four records, all asked as a JSON list, five fields, mixed formats;
  4. six records, all seven fields, mixed formats, plus corrections later in
     the document that override earlier values.
The verifier parses the JSON (bounded length; deep nesting is a counted
failure) and gives partial credit field by field: the score is the fraction
of expected fields reproduced exactly (strings compared case- and
space-insensitively, numbers by value), with extra records counted wrong.
"""

import json

import numpy as np

from rl_post.tasks.base import Domain, Task, Verdict

MAX_JSON_CHARS = 8192
_FIRST = ("Ada Alan Bea Carl Dana Eli Fay Gus Hana Ivan Jon Kai Lea Max Nia Omar Pia Quinn Rosa "
          "Sam Tara Uma Vic Wren Yara Zane").split()
_LAST = ("Abbot Brook Chen Diaz Evans Frost Gray Hale Ito Jones Klein Lopez Moss Novak Ortiz "
         "Park Quade Reyes Stone Tran Ueda Vance Walsh Young Zhou").split()
_CITIES = ("Lisbon Osaka Denver Nairobi Quito Oslo Lagos Perth Austin Hanoi Bergen Cusco Dakar "
           "Turin Leeds Pune").split()
_FILLER = ("The quarterly review is scheduled for next week.",
           "Please keep this memo for your records.",
           "Shipping times may vary during holidays.",
           "Our support desk is open on weekdays.",
           "All amounts are in US dollars.",
           "The warehouse moved to a new address in spring.")
FIELDS = ("name", "age", "city", "email", "order_id", "amount", "date")
_LEVELS = {1: (1, 3, False, False), 2: (3, 4, False, False), 3: (4, 5, True, False),
           4: (6, 7, True, True)}  # records, fields asked, key-value blocks, corrections


def _record(rng: np.random.Generator, name: str) -> dict:
  first, last = name.split()
  return {"name": name, "age": int(rng.integers(18, 90)), "city": str(rng.choice(_CITIES)),
          "email": f"{first.lower()}.{last.lower()}@example.com",
          "order_id": f"ORD-{int(rng.integers(10000, 100000))}",
          "amount": round(float(rng.integers(100, 100000)) / 100, 2),
          "date": f"2024-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}"}


def _prose(r: dict) -> str:
  return (f"{r['name']} ({r['age']} years old) lives in {r['city']} and can be reached at "
          f"{r['email']}. On {r['date']}, {r['name'].split()[0]} placed order {r['order_id']} "
          f"for ${r['amount']:.2f}.")


def _block(r: dict) -> str:
  return "\n".join(f"  {key}: {r[key]:.2f}" if key == "amount" else f"  {key}: {r[key]}"
                   for key in FIELDS)


def _document(rng, records, blocks, corrections):
  parts = ["MEMO: customer orders"]
  for r in records:
    parts.append(str(rng.choice(_FILLER)))
    parts.append(("Customer record:\n" + _block(r)) if blocks and rng.random() < 0.5 else _prose(r))
  for name, field, old, new in corrections:
    parts.append(f"Correction: the {field} of {name} is {new}, not {old}.")
  return "\n".join(parts)


class Extraction(Domain):
  """Extract records from a generated memo as JSON; partial credit per field."""

  name = "extraction"
  answer_formats = ("tags", "code_block", "last_line")  # JSON is not a number or a boxed term
  difficulty_levels = tuple(_LEVELS)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    n_records, n_fields, blocks, corrected = _LEVELS[difficulty]
    names = [f"{_FIRST[i]} {_LAST[j]}" for i, j in zip(
        rng.choice(len(_FIRST), n_records, replace=False),
        rng.choice(len(_LAST), n_records, replace=False))]
    records = [_record(rng, name) for name in names]
    fields = ["name"] + sorted(rng.choice(FIELDS[1:], n_fields - 1, replace=False).tolist(),
                               key=FIELDS.index)
    corrections = []
    if corrected:
      for i in rng.choice(n_records, 2, replace=False):
        new = str(rng.choice([c for c in _CITIES if c != records[i]["city"]]))
        corrections.append((records[i]["name"], "city", records[i]["city"], new))
    document = _document(rng, records, blocks, corrections)
    for name, field, _, new in corrections:
      next(r for r in records if r["name"] == name)[field] = new
    expected = [{k: r[k] for k in fields} for r in records]
    keys = ", ".join(f'"{k}"' for k in fields)
    if difficulty == 2:
      asked = int(rng.integers(n_records))
      expected = expected[asked]
      question = f"Extract the record of {names[asked]} as one JSON object with the keys {keys}."
    elif n_records == 1:
      expected = expected[0]
      question = f"Extract the customer's record as one JSON object with the keys {keys}."
    else:
      question = (f"Extract every customer record, in order of appearance, as a JSON list of "
                  f"objects with the keys {keys}.")
    if corrected:
      question += " Apply the corrections at the end of the memo."
    prompt = self.ask(f"{document}\n\n{question} Use numbers for age and amount.", "the JSON",
                      "Think in <think> </think> tags, then give only the JSON in <answer> "
                      "</answer> tags.")
    return Task(task_id=f"extraction/{difficulty}/{'|'.join(names)}/{'|'.join(fields)}",
                domain=self.name, prompt=prompt, difficulty=difficulty, target=expected,
                metadata={"fields": fields})

  def demonstration(self, task: Task) -> str:
    count = len(task.target) if isinstance(task.target, list) else 1
    return self.respond(f"{count} record(s), fields {', '.join(task.metadata['fields'])}",
                        json.dumps(task.target))

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # parses text only
    reading = self.read(completion)
    format_ok, answer = reading.format_ok, reading.answer
    if answer is None:
      return Verdict(0.0, format_ok, None, self.no_answer)
    if len(answer) > MAX_JSON_CHARS:
      return Verdict(0.0, format_ok, answer[:256], "answer too long")
    try:
      predicted = json.loads(_strip_fence(answer))
    except (ValueError, RecursionError) as e:
      return Verdict(0.0, format_ok, answer[:256], f"invalid JSON: {type(e).__name__}",
                     components={"json_valid": 0.0})
    score = field_score(task.target, predicted, task.metadata["fields"])
    return Verdict(score, format_ok, answer[:256], None, components={"json_valid": 1.0})


def _strip_fence(text: str) -> str:
  """Drops a ```json ... ``` fence around the JSON, if any."""
  if text.startswith("```") and text.endswith("```") and len(text) >= 6:
    text = text[3:-3]
    return text[4:] if text.startswith("json") else text
  return text


def same_value(expected, predicted) -> bool:
  """Strings case- and space-insensitively; numbers by value (also from numeric strings)."""
  if isinstance(expected, bool) or isinstance(predicted, bool):
    return False
  if isinstance(expected, (int, float)):
    if isinstance(predicted, str) and len(predicted) <= 32:
      try:
        predicted = float(predicted.strip().lstrip("$"))
      except ValueError:
        return False
    return isinstance(predicted, (int, float)) and abs(predicted - expected) < 1e-6
  if isinstance(predicted, str):
    return " ".join(predicted.split()).casefold() == " ".join(str(expected).split()).casefold()
  return False


def _record_score(expected: dict, predicted, fields) -> int:
  if not isinstance(predicted, dict):
    return 0
  return sum(same_value(expected[k], predicted.get(k)) for k in fields)


def field_score(expected, predicted, fields) -> float:
  """Fraction of expected fields reproduced; records are matched by name, extras count wrong."""
  if isinstance(expected, dict):
    return _record_score(expected, predicted, fields) / len(fields)
  if not isinstance(predicted, list):
    return 0.0
  by_name = {}
  for item in predicted:
    if isinstance(item, dict) and isinstance(item.get("name"), str):
      by_name.setdefault(" ".join(item["name"].split()).casefold(), item)
  correct = sum(_record_score(r, by_name.get(r["name"].casefold()), fields) for r in expected)
  return correct / (len(fields) * max(len(expected), len(predicted)))
