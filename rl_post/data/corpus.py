"""The tokenizer's training corpus, generated from the task domains.

Lines are full training examples (prompt, newline, reference response) of
every configured domain and difficulty, so the tokenizer learns the pieces
the model will actually see; tags and the newline are atomic symbols of the
tokenizer itself, not learned merges.
"""

from typing import Iterator

from rl_post.data.mixture import TaskMixture


def domain_corpus(mixture: TaskMixture, num_examples: int) -> Iterator[str]:
  """`num_examples` lines of prompt + newline + demonstration."""
  for step in range(0, num_examples, 256):
    for task in mixture.sample(step, min(256, num_examples - step), stream="sft"):
      yield task.prompt + "\n" + mixture.domain_of(task).demonstration(task)
