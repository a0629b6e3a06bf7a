"""The reasoning-gym adapter: coverage, difficulty mapping, wrapped and fixed scorers."""

import sys

import numpy as np
import pytest

from rl_post.tasks import registry, rg_scorers
from rl_post.tasks.base import Task
from rl_post.tasks.reasoning_gym import EXCLUDED, GENERATORS, ReasoningGymDomain, domain_names

from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum


def _answer(text):
  return f"<think>w</think>\n<answer>{text}</answer>"


def test_every_generator_is_listed_and_registered():
  assert set(GENERATORS) == set(DATASETS) - {"composite"}
  assert len(GENERATORS) == 105
  assert set(EXCLUDED) <= set(GENERATORS)
  names = domain_names()
  assert len(names) == 105 - len(EXCLUDED)
  assert set(names) <= set(registry.available())
  assert "rg/rush_hour" not in registry.available()
  with pytest.raises(ValueError, match="excluded: no reference answer"):
    ReasoningGymDomain("rush_hour")
  with pytest.raises(ValueError, match="unknown reasoning-gym generator"):
    ReasoningGymDomain("no_such_generator")


def test_difficulty_follows_the_curriculum():
  domain = ReasoningGymDomain("chain_sum")
  curriculum = create_curriculum("chain_sum")
  n_levels = max(len(a.levels) for a in curriculum.attributes.values())
  assert domain.difficulty_levels == tuple(range(1, n_levels + 1))
  for level in (1, n_levels):
    curriculum.set_global_level(level - 1)
    expected = curriculum.generate_configuration({"seed": 0, "size": 100_000})
    assert domain._dataset(level).config == expected
  easy, hard = (domain.generate(np.random.default_rng(0), d) for d in (1, n_levels))
  assert easy.target["metadata"]["num_terms"] < hard.target["metadata"]["num_terms"]


def test_invalid_and_slow_levels_are_dropped():
  assert ReasoningGymDomain("caesar_cipher").difficulty_levels == (1, 2)  # 3, 4 fail validation
  assert ReasoningGymDomain("jugs").difficulty_levels == (1, 2)  # capped: seconds per task above
  assert ReasoningGymDomain("rubiks_cube").difficulty_levels == (1,)  # 3x3 reference only
  assert "knight_swap" in CURRICULA
  assert ReasoningGymDomain("knight_swap").difficulty_levels == (1,)  # no valid level: default


def _hostile_python(tmp_path):
  marker = tmp_path / "pwned"
  return marker, f"__import__('os').system('touch {marker}')"


@pytest.mark.parametrize("generator", rg_scorers.EVAL_MODULES + tuple(rg_scorers.SYMPY_MODULES)
                         + rg_scorers.NUMERIC_PARSE_MODULES)
def test_scorers_never_run_model_text(generator, tmp_path):
  domain = ReasoningGymDomain(generator)
  task = domain.generate(np.random.default_rng(0), 1)
  marker, attack = _hostile_python(tmp_path)
  for text in (attack, f"[{attack}]", f"x + {attack}", "(lambda: 1)()", "9**9**9**9"):
    verdict = domain.verify(task, _answer(text))
    assert verdict.score < 1
  assert not marker.exists()
  assert domain.verify(task, domain.demonstration(task)).correct  # the safe path still scores


def test_unsafe_names_are_rebound_in_the_scorer_modules():
  ReasoningGymDomain("n_queens")  # installs the safe paths
  for name in rg_scorers.EVAL_MODULES:
    assert sys.modules[DATASETS[name][0].__module__].eval is rg_scorers.literal_eval
  for name in rg_scorers.NUMERIC_PARSE_MODULES:
    assert sys.modules[DATASETS[name][0].__module__].parse_expr is rg_scorers.numeric_parse_expr
  for name, attr in rg_scorers.SYMPY_MODULES.items():
    assert isinstance(getattr(sys.modules[DATASETS[name][0].__module__], attr),
                      rg_scorers.CheckedSympy)


def test_safe_replacements():
  assert rg_scorers.literal_eval("[[1, 2], ['a']]") == [[1, 2], ["a"]]
  assert rg_scorers.numeric_parse_expr("(1+2)*8") == 24
  for bad in ["49/2", "2**5", "__import__('os')"]:  # sympy's int() made 49/2 count as 24
    with pytest.raises(rg_scorers.UnsafeText):
      rg_scorers.numeric_parse_expr(bad)
  for bad in ["__import__('os')", "open('f')", "[1] * 10**9", "[" * 100_000]:
    with pytest.raises(rg_scorers.UnsafeText):
      rg_scorers.literal_eval(bad)


def test_game_of_life_halting_no_longer_accepts_any_answer():
  domain = ReasoningGymDomain("game_of_life_halting")
  task = domain.generate(np.random.default_rng(0), 1)
  original = DATASETS["game_of_life_halting"][0](config=domain._configs[0]).score_answer
  entry = {"question": "", **task.target}
  assert original("x", entry) == 1.0  # the bug: any non-empty string is truthy
  truth = str(task.target["answer"])
  opposite = "False" if truth == "True" else "True"
  assert domain.verify(task, _answer("x")).score == 0.0
  assert domain.verify(task, _answer(opposite)).score == 0.0
  assert domain.verify(task, _answer(truth.lower())).score == 1.0


def test_scorer_exceptions_and_bad_scores_are_contained(monkeypatch):
  domain = ReasoningGymDomain("basic_arithmetic")
  task = domain.generate(np.random.default_rng(0), 1)
  dataset = domain._dataset(1)
  for returned, score, error in [(ZeroDivisionError(), 0.0, "scorer raised ZeroDivisionError"),
                                 (float("nan"), 0.0, "scorer returned a non-finite score"),
                                 (7.0, 1.0, None), (-1.0, 0.0, None)]:
    def scorer(answer, entry, returned=returned):
      if isinstance(returned, Exception):
        raise returned
      return returned
    monkeypatch.setattr(dataset, "score_answer", scorer)
    verdict = domain.verify(task, _answer("1"))
    assert (verdict.score, verdict.error) == (score, error)


def test_long_answers_are_refused_before_the_scorer(monkeypatch):
  domain = ReasoningGymDomain("word_sorting")
  task = domain.generate(np.random.default_rng(0), 1)
  monkeypatch.setattr(domain._dataset(1), "score_answer", lambda *a: pytest.fail("scored"))
  verdict = domain.verify(task, _answer("a, " * 100_000))
  assert verdict.score == 0.0 and verdict.error.startswith("answer longer than")


def test_unsolvable_jugs_puzzles_are_redrawn():
  domain = ReasoningGymDomain("jugs")
  rng = np.random.default_rng(2)  # draws a "No solution" entry at level 2 unless redrawn
  for _ in range(6):
    task = domain.generate(rng, 2)
    assert "No solution" not in task.metadata["reference"]
    assert domain.verify(task, domain.demonstration(task)).correct


def test_tasks_are_deterministic_and_keep_the_reference():
  domain = ReasoningGymDomain("graph_color")  # no unique answer: the example solution
  a, b = (domain.generate(np.random.default_rng(5), 2) for _ in range(2))
  assert a == b and a.target["answer"] is None and a.metadata["reference"]
  assert domain.verify(a, domain.demonstration(a)).correct
  assert isinstance(a, Task) and a.prompt.endswith("<answer> </answer> tags.")
