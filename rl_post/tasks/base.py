"""The Domain interface every task family implements.

A domain generates tasks at a difficulty level, writes a reference response
for SFT demonstrations, and verifies a model completion. Verification only
parses text here; domains that execute model output do so in the sandbox.
Tasks are plain, picklable data so verifiers can run in worker processes.
"""

import abc
import dataclasses
import re
from typing import Any, Mapping

import numpy as np

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
MAX_ANSWER_CHARS = 256


@dataclasses.dataclass(frozen=True)
class Task:
  """One problem instance.

  Attributes:
    task_id: stable id (domain, difficulty, seed-derived index).
    domain: the Domain name.
    prompt: the text shown to the model.
    difficulty: integer level, 1 = easiest.
    target: what the verifier compares against; never shown to the model.
    metadata: free-form, JSON-serialisable details.
  """
  task_id: str
  domain: str
  prompt: str
  difficulty: int
  target: Any
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Verdict:
  """A verifier's judgement of one completion.

  Attributes:
    correct: the task was completed.
    format_ok: the completion follows the required response format.
    answer: the extracted answer text (None if absent).
    error: why the answer could not be judged, for counting failures.
  """
  correct: bool
  format_ok: bool
  answer: str | None = None
  error: str | None = None


def extract_answer(completion: str) -> str | None:
  """The content of the last <answer>...</answer>, stripped, or None."""
  matches = ANSWER_RE.findall(completion)
  return matches[-1].strip() if matches else None


def has_reasoning_format(completion: str) -> bool:
  """<think>...</think> then <answer>...</answer>, nothing after the answer."""
  text = completion.strip()
  think_end = text.find("</think>")
  return (text.startswith("<think>") and think_end > 0 and text.count("<answer>") == 1
          and text.endswith("</answer>") and text.find("<answer>") > think_end)


class Domain(abc.ABC):
  """A family of verifiable tasks with difficulty levels."""

  name: str
  difficulty_levels: tuple[int, ...]

  @abc.abstractmethod
  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    """Draws one task at `difficulty` from `rng`."""

  @abc.abstractmethod
  def demonstration(self, task: Task) -> str:
    """A correct, well-formatted response (for SFT)."""

  @abc.abstractmethod
  def verify(self, task: Task, completion: str) -> Verdict:
    """Judges `completion`; must not raise on any string."""

  def check_difficulty(self, difficulty: int):
    if difficulty not in self.difficulty_levels:
      raise ValueError(f"{self.name}: difficulty must be one of {self.difficulty_levels}, "
                       f"got {difficulty!r}")
