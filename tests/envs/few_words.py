"""A word_hunt domain with exactly three distinct tasks per level, each drawn under a fresh
random `task_id`, for the tests of held-out disjointness (tests/envs/test_heldout_episodes.py).

    c.episodes.domains = ("tests.envs.few_words:FewWords",)
"""

import dataclasses

import numpy as np

from tests.envs.word_hunt import WordHunt

DISTINCT = 3  # tasks per level


class FewWords(WordHunt):
  name = "few_words"

  def generate(self, rng, difficulty):
    which = int(rng.integers(DISTINCT))
    task = super().generate(np.random.default_rng([difficulty, which]), difficulty)
    return dataclasses.replace(task, task_id=f"few_words-{difficulty}-{rng.integers(1 << 30)}")
