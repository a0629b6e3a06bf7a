"""reasoning-gym (0.1.25) generators as domains named "rg/<generator>".

Difficulty: a generator with a curriculum gets one level per curriculum
global level (level d sets `set_global_level(d - 1)` and builds the config
from it); levels whose config the generator itself rejects are skipped, and
a few slow generators are capped where one task takes over ~1 s to draw.
A generator without a curriculum (or none of whose levels is valid) has one
level, its default config. A task is item `i` of the level's dataset, `i`
drawn from the caller's rng, so tasks are deterministic for a seed.

Verification calls the generator's own scorer, wrapped: the answer comes
from the last <answer> tag (linear time), answers longer than a bound are
refused before the scorer sees them, an exception scores 0, the result is
clamped to [0, 1], and unsafe scorers go through `rg_scorers` (no `eval` of
model text; the scorer that accepted any answer is fixed).
"""

import copy
import math

import numpy as np

from rl_post.tasks import rg_scorers
from rl_post.tasks.base import Domain, Task, Verdict

GENERATORS = (
    "ab", "acre", "advanced_geometry", "aiw", "arc_1d", "arc_agi", "base_conversion",
    "basic_arithmetic", "bf", "binary_alternation", "binary_matrix", "bitwise_arithmetic",
    "boxnet", "caesar_cipher", "calendar_arithmetic", "chain_sum", "circuit_logic", "codeio",
    "coin_flip", "color_cube_rotation", "complex_arithmetic", "count_bits", "count_primes",
    "countdown", "course_schedule", "cryptarithm", "decimal_arithmetic", "decimal_chain_sum",
    "dice", "emoji_mystery", "family_relationships", "figlet_font", "fraction_simplification",
    "futoshiki", "game_of_life", "game_of_life_halting", "gcd", "graph_color", "group_anagrams",
    "gsm_symbolic", "intermediate_integration", "isomorphic_strings", "jugs", "kakurasu",
    "knight_swap", "knights_knaves", "largest_island", "lcm", "leg_counting", "letter_counting",
    "letter_jumble", "list_functions", "mahjong_puzzle", "manipulate_matrix", "maze",
    "mini_sudoku", "modulo_grid", "n_queens", "needle_haystack", "number_filtering",
    "number_format", "number_sequence", "number_sorting", "palindrome_generation",
    "palindrome_partitioning", "path_star", "polynomial_equations", "polynomial_multiplication",
    "pool_matrix", "power_function", "prime_factorization", "products", "propositional_logic",
    "puzzle24", "quantum_lock", "ransom_note", "rearc", "rectangle_count", "rotate_matrix",
    "rotten_oranges", "rubiks_cube", "rush_hour", "self_reference", "sentence_reordering",
    "shortest_path", "simple_equations", "simple_geometry", "simple_integration", "sokoban",
    "spell_backward", "spiral_matrix", "string_insertion", "string_manipulation",
    "string_splitting", "string_synthesis", "sudoku", "survo", "syllogism", "time_intervals",
    "tower_of_hanoi", "tsumego", "word_ladder", "word_sequence_reversal", "word_sorting",
    "zebra_puzzles")  # the package's 105 generators ("composite" only mixes these)
EXCLUDED = {
    "sokoban": "generation time is heavy-tailed (minutes for some seeds, even at level 1)",
    "boxnet": "no reference answer to demonstrate (needs a multi-agent planner)",
    "rush_hour": "no reference answer to demonstrate (needs a puzzle solver)",
}
# jugs, zebra_puzzles: seconds per task beyond; bf: level 3 generates
# programs that never halt for some seeds (its generator then spins forever);
# rubiks_cube: its example solution (our demonstration) only solves level 1's 3x3.
MAX_LEVEL = {"jugs": 2, "zebra_puzzles": 4, "bf": 2, "rubiks_cube": 1}
# jugs sometimes draws an unsolvable puzzle whose reference ("No solution")
# its own scorer rejects: its references are scored at generation.
CHECK_REFERENCE = frozenset({"jugs"})
REFERENCE_KEYS = ("possible_answer", "example_answer", "example_correct_answer")  # where a None answer's example lives
TAGS_INSTRUCTION = ("Think in <think> </think> tags, then give only the final answer in "
                    "<answer> </answer> tags.")
_SEP = "\n\n"  # between the generator's question and the answer-format instruction
MIN_ANSWER_CAP = 2048
# Item i of a dataset is generated from seed + i, but a few generators draw
# per-item state up front (gsm_symbolic, acre) or cap the size (word_ladder).
_SIZE = 100_000
SIZES = {"acre": 500, "word_ladder": 20_000}
_GENERATE_TRIES = 5


def domain_names() -> list[str]:
  return [f"rg/{g}" for g in GENERATORS if g not in EXCLUDED]


def level_configs(generator: str, seed: int) -> list:
  """The valid configs, easiest first, one per difficulty level."""
  from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum
  config_cls = DATASETS[generator][1]
  configs = []
  if generator in CURRICULA:
    curriculum = create_curriculum(generator)
    n_levels = max(len(a.levels) for a in curriculum.attributes.values())
    for level in range(min(n_levels, MAX_LEVEL.get(generator, n_levels))):
      curriculum.set_global_level(level)
      try:
        config = curriculum.generate_configuration(
            {"seed": seed, "size": SIZES.get(generator, _SIZE)})
        if hasattr(config, "validate"):
          config.validate()
      except (AssertionError, ValueError, TypeError):
        continue  # the curriculum reaches configs its own generator rejects
      configs.append(config)
  return configs or [config_cls(seed=seed, size=SIZES.get(generator, _SIZE))]


def reference_answer(entry) -> str | None:
  """The entry's answer, or the example solution of generators without a unique one."""
  if entry["answer"] is not None:
    return str(entry["answer"])
  import json
  for key in REFERENCE_KEYS:
    value = entry["metadata"].get(key)
    if value is not None:
      return value if isinstance(value, str) else json.dumps(value)
  return None


class ReasoningGymDomain(Domain):
  """One reasoning-gym generator; construct with the generator name."""

  def __init__(self, generator: str, seed: int = 0):
    """Args:
      generator: a name in GENERATORS, not EXCLUDED.
      seed: the datasets' base seed (tasks also depend on the caller's rng).
    """
    if generator not in GENERATORS:
      raise ValueError(f"unknown reasoning-gym generator {generator!r}")
    if generator in EXCLUDED:
      raise ValueError(f"reasoning-gym generator {generator!r} is excluded: "
                       f"{EXCLUDED[generator]}")
    import reasoning_gym  # noqa: F401  (registers the generators)
    rg_scorers.install()
    self.generator = generator
    self.name = f"rg/{generator}"
    self._configs = level_configs(generator, seed)
    self.difficulty_levels = tuple(range(1, len(self._configs) + 1))
    self._datasets = {}

  def _dataset(self, difficulty: int):
    if difficulty not in self._datasets:
      from reasoning_gym.factory import DATASETS
      self._datasets[difficulty] = DATASETS[self.generator][0](
          config=self._configs[difficulty - 1])
    return self._datasets[difficulty]

  def generate(self, rng: np.random.Generator, difficulty: int) -> Task:
    self.check_difficulty(difficulty)
    dataset = self._dataset(difficulty)
    for _ in range(_GENERATE_TRIES):  # a few generators give up on unlucky seeds
      index = int(rng.integers(len(dataset)))
      try:
        entry = dataset[index]
      except (ValueError, AssertionError, RuntimeError, IndexError):
        continue
      reference = reference_answer(entry)
      if (reference is not None and rg_scorers.accepts_reference(self.generator, reference)
          and (self.generator not in CHECK_REFERENCE
               or dataset.score_answer(reference, copy.deepcopy(entry)) == 1.0)):
        break
    else:
      raise RuntimeError(f"{self.name}: no task at level {difficulty} in {_GENERATE_TRIES} tries")
    return Task(task_id=f"{self.name}/{difficulty}/{index}", domain=self.name,
                prompt=self.ask(entry["question"], "the final answer", TAGS_INSTRUCTION, _SEP),
                difficulty=difficulty,
                target={"answer": entry["answer"], "metadata": entry["metadata"]},
                metadata={"reference": reference, "question_chars": len(entry["question"])})

  def demonstration(self, task: Task) -> str:
    return self.respond("Working it out.", task.metadata["reference"])

  def verify(self, task: Task, completion: str, *, sandbox=None) -> Verdict:
    del sandbox  # scorers only parse text (unsafe ones go through rg_scorers)
    reading = self.read(completion)
    format_ok, answer = reading.format_ok, reading.answer
    if answer is None:
      return Verdict(0.0, format_ok, None, self.no_answer)
    cap = max(MIN_ANSWER_CAP, 8 * len(task.metadata["reference"]))
    if len(answer) > cap:
      return Verdict(0.0, format_ok, answer[:256], f"answer longer than {cap} characters")
    entry = copy.deepcopy({"question": _question(task), **task.target})
    scorer = rg_scorers.FIXED_SCORERS.get(self.generator,
                                          self._dataset(task.difficulty).score_answer)
    try:
      score = float(scorer(answer, entry))
    except Exception as e:  # an exception scores 0, counted by its error
      return Verdict(0.0, format_ok, answer[:256], f"scorer raised {type(e).__name__}")
    if not math.isfinite(score):
      return Verdict(0.0, format_ok, answer[:256], "scorer returned a non-finite score")
    return Verdict(min(max(score, 0.0), 1.0), format_ok, answer[:256])


def _question(task: Task) -> str:
  """The generator's question: the prompt without its answer-format instruction
  (tasks stored before `question_chars` existed end with the tags instruction)."""
  chars = task.metadata.get("question_chars")
  if chars is None:
    return task.prompt[:-len(_SEP + TAGS_INSTRUCTION)]
  return task.prompt[:chars]
