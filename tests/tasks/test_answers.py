"""Answer formats: reading per format on hand-made and hostile text (bounded time),
instructions, and demonstrations that read back strictly."""

import time

import pytest

from rl_post.tasks import answers
from rl_post.tasks.answers import Reading

READ_SECONDS = 2.0  # each hostile reading is linear: milliseconds; generous for a loaded CI


@pytest.mark.parametrize("fmt,text,expected", [
    ("tags", "<think>7+8</think>\n<answer>15</answer>", Reading("15", True)),
    ("tags", "so <answer> 15 </answer> ok", Reading("15", False)),
    ("tags", "15", Reading(None, False)),
    ("final_number", "7 + 8 = 15.", Reading("15", True)),
    ("final_number", "The answer is **15**", Reading("15", True)),
    ("final_number", "15 is the answer, I hope this helps!", Reading("15", False)),
    ("final_number", "Total: -1,234.50", Reading("-1234.50", True)),
    ("final_number", "It is 15.0", Reading("15", True)),
    ("final_number", "x2 and 7-8", Reading("8", True)),
    ("final_number", "no digits", Reading(None, False)),
    ("boxed", "So $\\boxed{\\frac{1}{2}}$.", Reading("\\frac{1}{2}", True)),
    ("boxed", "\\boxed{1} then \\boxed{2}", Reading("2", False)),
    ("boxed", "\\boxed{unclosed", Reading(None, False)),
    ("last_line", "Counting...\nAnswer: Paris.", Reading("Paris", True)),
    ("last_line", "**Final answer:** 42", Reading("42", True)),
    ("last_line", "Work\nAnswer: 1 2\n3 4", Reading("1 2\n3 4", True)),
    ("last_line", "We add them.\nThe answer is 12.", Reading("12", False)),
    ("last_line", "so the answer: 3", Reading("3", False)),
    ("last_line", "  \n\n", Reading(None, False)),
    ("code_block", "Here:\n```python\nprint(1)\n```\n", Reading("print(1)", True)),
    ("code_block", "```\na\n```\nand\n```sql\nb\n```", Reading("b", False)),
    ("code_block", "no fence", Reading(None, False)),
])
def test_each_format_reads_its_answer_and_strictness(fmt, text, expected):
  assert answers.read(text, fmt) == expected


HOSTILE = ("<answer>" * 50_000, "\\boxed{" * 50_000, "{" * 200_000, "9" * 500_000,
           "1," * 200_000, "-" * 200_000 + "1", "```" * 50_000, "Answer:" * 50_000,
           "\n" * 500_000, "1." * 200_000, "\\boxed{" + "{" * 100_000 + "}" * 100_000 + "}")


@pytest.mark.parametrize("fmt", answers.FORMATS)
def test_hostile_text_is_read_in_bounded_time(fmt):
  for text in HOSTILE:
    start = time.perf_counter()
    reading = answers.read(text, fmt)
    assert time.perf_counter() - start < READ_SECONDS, (fmt, text[:20])
    assert reading.answer is None or isinstance(reading.answer, str)


def test_a_boxed_answer_nested_deeper_than_the_bound_is_not_read():
  text = "\\boxed{" + "{" * answers.MAX_BOXED_CHARS + "}" * answers.MAX_BOXED_CHARS + "}"
  assert answers.read(text, "boxed") == Reading(None, False)


@pytest.mark.parametrize("fmt", answers.FORMATS)
@pytest.mark.parametrize("work,answer", [("7+8 is fifteen", "15"), ("", "-3"),
                                         ("Step one.\nStep two.", "42")])
def test_rendered_demonstrations_read_back_strictly(fmt, work, answer):
  assert answers.read(answers.render(fmt, work, answer), fmt) == Reading(answer, True)


def test_unknown_format_is_a_clear_error():
  with pytest.raises(ValueError, match="answer_format must be one of"):
    answers.read("15", "xml")
  with pytest.raises(ValueError, match=r"\['tags', 'boxed'\]"):
    answers.check_format("final_number", ("tags", "boxed"))


def test_instructions_name_what_is_asked_for():
  assert answers.instruction("final_number", "the answer") == (
      "End your response with the answer as a number.")
  assert "\\boxed{}" in answers.instruction("boxed", "the answer")
  assert "'Answer: ...'" in answers.instruction("last_line", "the answer")
