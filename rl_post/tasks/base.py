"""The Domain interface every task family implements.

A domain generates tasks at a difficulty level, writes a reference response
for SFT demonstrations, and verifies a model completion. Verification only
parses text here; domains that execute model output do so in the sandbox.
Tasks are plain, picklable data so verifiers can run in worker processes.
"""

import abc
import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from rl_post.tasks import answers

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


StepScore = tuple[int, int, float]  # (char_start, char_end, score) of a span of the completion


@dataclasses.dataclass(frozen=True)
class Verdict:
  """A verifier's judgement of one completion.

  Attributes:
    score: outcome credit in [0, 1] (partial credit, e.g. the fraction of
      unit tests passed); the task is completed iff score == 1.
    format_ok: the completion follows the required response format.
    answer: the extracted answer text (None if absent).
    error: why the answer could not be judged, for counting failures.
    components: further named reward components in [0, 1] a domain adds
      (e.g. "efficiency"); "outcome" and "format" come from score/format_ok.
    step_scores: process credit, (char_start, char_end, score) spans of the
      completion; the trainer maps them to tokens.
  Raises:
    ValueError: on a score that is not a finite number in [0, 1] or a
      format_ok that is not a bool (the reward path counts it as an error).
  """
  score: float
  format_ok: bool
  answer: str | None = None
  error: str | None = None
  components: Mapping[str, float] = dataclasses.field(default_factory=dict)
  step_scores: tuple[StepScore, ...] = ()

  def __post_init__(self):
    object.__setattr__(self, "score", _unit_float(self.score, "score"))
    if not isinstance(self.format_ok, (bool, np.bool_)):
      raise ValueError(f"Verdict.format_ok must be a bool, got {self.format_ok!r}")
    object.__setattr__(self, "format_ok", bool(self.format_ok))
    object.__setattr__(self, "components", {
        str(k): _unit_float(v, f"components[{k!r}]") for k, v in dict(self.components).items()})
    spans = []
    for span in self.step_scores:
      start, end, value = span
      if not (isinstance(start, (int, np.integer)) and isinstance(end, (int, np.integer))
              and 0 <= start <= end):
        raise ValueError(f"Verdict.step_scores span {span!r} needs 0 <= start <= end (ints)")
      spans.append((int(start), int(end), _unit_float(value, "step_scores")))
    object.__setattr__(self, "step_scores", tuple(spans))

  @property
  def correct(self) -> bool:
    return self.score == 1.0


def _unit_float(value, name: str) -> float:
  """`value` as a float in [0, 1]; bools count as 0/1; anything else raises."""
  if isinstance(value, (bool, np.bool_)):
    return float(value)
  if not isinstance(value, (int, float, np.integer, np.floating)):
    raise ValueError(f"Verdict.{name} must be a number in [0, 1], got {value!r}")
  value = float(value)
  if not 0.0 <= value <= 1.0:  # also rejects NaN
    raise ValueError(f"Verdict.{name} must be in [0, 1], got {value!r}")
  return value


def failed(error: str, answer: str | None = None) -> Verdict:
  """A zero-score verdict for a completion that could not be judged."""
  return Verdict(0.0, False, answer, error)


def extract_answer(completion: str) -> str | None:
  """The content of the last complete <answer>...</answer>, stripped, or None.

  Linear time on any input (two reverse searches), so completions made of
  many unclosed tags cannot stall a verifier.
  """
  return answers.tag_content(completion)


def think_span(completion: str) -> tuple[int, int] | None:
  """Character range of the first <think>...</think> section's content, or None."""
  start = completion.find("<think>")
  if start < 0:
    return None
  start += len("<think>")
  end = completion.find("</think>", start)
  return None if end < 0 else (start, end)


has_reasoning_format = answers.has_reasoning_format


class Domain(abc.ABC):
  """A family of verifiable tasks with difficulty levels.

  How a response gives its answer is the domain's `answer_format` (one of
  its `answer_formats`, `rl_post.tasks.answers`), set from config
  (`tasks.domain_options.<name>.answer_format`) by the registry; domains ask
  for it with `ask`, read it with `read` and demonstrate it with `respond`.
  """

  name: str
  difficulty_levels: tuple[int, ...]
  answer_format: str = "tags"
  answer_formats: tuple[str, ...] = answers.TEXT_FORMATS

  def set_answer_format(self, answer_format: str):
    """Selects how answers are asked for and read; ValueError if this domain lacks it."""
    self.answer_format = answers.check_format(answer_format, self.answer_formats)

  def ask(self, question: str, what: str, tags_instruction: str, sep: str = " ") -> str:
    """`question` followed by the instruction of this domain's answer format.

    Args:
      question: the task itself.
      what: what the answer is, for the generic instructions ("the final answer").
      tags_instruction: the domain's own wording for the "tags" format ("" for none).
      sep: between the question and the instruction.
    """
    text = (tags_instruction if self.answer_format == "tags"
            else answers.instruction(self.answer_format, what))
    return f"{question}{sep}{text}" if text else question

  def read(self, completion: str) -> answers.Reading:
    """The answer of `completion` in this domain's format (linear time)."""
    return answers.read(completion, self.answer_format)

  def respond(self, work: str, answer: str) -> str:
    """A demonstration that shows `work` then gives `answer` in this domain's format."""
    return answers.render(self.answer_format, work, answer)

  @property
  def no_answer(self) -> str:
    """The verdict error of a completion without an answer in this domain's format."""
    return "no <answer> tag" if self.answer_format == "tags" else f"no {self.answer_format} answer"

  @abc.abstractmethod
  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    """Draws one task at `difficulty` from `rng`."""

  @abc.abstractmethod
  def demonstration(self, task: Task) -> str:
    """A correct, well-formatted response (for SFT)."""

  @abc.abstractmethod
  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    """Judges `completion`; must not raise on any string.

    `sandbox` is the host's shared, pooled `rl_post.sandbox.Sandbox` (None
    where none is available); domains that execute model output run it
    there, never in the calling process.
    """

  def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str], *,
                   sandbox=None) -> list[Verdict]:
    """Verdicts for many completions; domains that execute code override
    this to grade the whole batch with one `sandbox.run_many`."""
    return [self.verify(t, c, sandbox=sandbox) for t, c in zip(tasks, completions, strict=True)]

  def check_difficulty(self, difficulty: int):
    if difficulty not in self.difficulty_levels:
      raise ValueError(f"{self.name}: difficulty must be one of {self.difficulty_levels}, "
                       f"got {difficulty!r}")
