"""Test-only domains with five difficulty levels, importable by path."""

import numpy as np

from rl_post.tasks.base import Domain, Task, Verdict, extract_answer


class _Levels(Domain):
  """Echo a number; the level only labels the task (cheap to generate)."""

  difficulty_levels = (1, 2, 3, 4, 5)

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    i = int(rng.integers(0, 10 ** 9))
    return Task(task_id=f"{self.name}/{difficulty}/{i}", domain=self.name,
                prompt=f"Repeat {i % 1000}.", difficulty=difficulty, target=i % 1000,
                metadata={"pair": (difficulty, i % 7), "tags": ["x", "y"]})

  def demonstration(self, task: Task) -> str:
    return f"<think>echo</think>\n<answer>{task.target}</answer>"

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    answer = extract_answer(completion)
    return Verdict(answer == str(task.target), answer is not None, answer)


class LevelsA(_Levels):
  name = "mixture_fixtures:LevelsA"


class LevelsB(_Levels):
  name = "mixture_fixtures:LevelsB"


class LevelsC(_Levels):
  name = "mixture_fixtures:LevelsC"


class LevelsD(_Levels):
  name = "mixture_fixtures:LevelsD"


A, B, C, D = (f"mixture_fixtures:Levels{x}" for x in "ABCD")


class DigitLevels(_Levels):
  """Correct if the completion contains a digit, at every level (learnable, cheap)."""

  name = "mixture_fixtures:DigitLevels"
  difficulty_levels = (1, 2, 3, 4)

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    return Verdict(any(c.isdigit() for c in completion), True, completion[:8])


DIGIT_LEVELS = "mixture_fixtures:DigitLevels"
