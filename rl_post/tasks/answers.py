r"""Answer formats: how a completion's answer is read, asked for and demonstrated.

One module for every single-turn domain, so a pretrained chat model's
natural answer is gradeable wherever a config says how to read it
(`tasks.domain_options.<domain>.answer_format`):

  tags          "<think>...</think>\n<answer>X</answer>" (the default): the
                content of the last complete <answer> tag; strict format:
                the whole response is a think section then one answer tag.
  final_number  the last number in the response ("7 + 8 = 15."); strict:
                nothing but punctuation or markup follows it.
  boxed         the content of the last \boxed{...} (nested braces kept);
                strict: exactly one \boxed{}.
  last_line     the text after the last "Answer:" (it may span lines), else
                the last non-empty line ("The answer is" dropped), markdown
                emphasis and a closing period dropped; strict: an "Answer:"
                (or "Final answer:") starts a line.
  code_block    the last complete ``` fenced block (its language tag
                dropped); strict: exactly one fenced block.

A `Reading` separates the answer (graded for answer-only completion) from
`format_ok` (format-strict completion needs both), so evaluation can report
a format gain apart from a capability gain. Every reader runs in time
linear in the completion (reverse searches and one regex without nested
quantifiers), whatever the text holds.
"""

import dataclasses
import re

FORMATS = ("tags", "final_number", "boxed", "last_line", "code_block")
TEXT_FORMATS = ("tags", "final_number", "boxed", "last_line")  # answers that are short text
MAX_BOXED_CHARS = 4096  # a \boxed{} whose braces do not close within this is not an answer
_FENCE = "```"
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")
_TRAILER = frozenset(" \t\r\n.!*_`$)]}\"'")  # what may follow a strict final number
_LEADS = ("the final answer is", "the answer is")  # a last line without an "Answer:" marker


@dataclasses.dataclass(frozen=True)
class Reading:
  """What a reader found in one completion.

  Attributes:
    answer: the extracted answer text, stripped (None when there is none).
    format_ok: the completion follows the format strictly.
  """
  answer: str | None
  format_ok: bool


def check_format(answer_format: str, allowed: tuple[str, ...] = FORMATS) -> str:
  """`answer_format` if it is one of `allowed`; ValueError naming them otherwise."""
  if answer_format not in allowed:
    raise ValueError(f"answer_format must be one of {list(allowed)}, got {answer_format!r}")
  return answer_format


def tag_content(completion: str, tag: str = "answer") -> str | None:
  """The content of the last complete <tag>...</tag>, stripped, or None."""
  close = completion.rfind(f"</{tag}>")
  if close < 0:
    return None
  start = completion.rfind(f"<{tag}>", 0, close)
  if start < 0:
    return None
  return completion[start + len(tag) + 2:close].strip()


def has_reasoning_format(completion: str) -> bool:
  """<think>...</think> then <answer>...</answer>, nothing after the answer."""
  text = completion.strip()
  think_end = text.find("</think>")
  return (text.startswith("<think>") and think_end > 0 and text.count("<answer>") == 1
          and text.endswith("</answer>") and text.find("<answer>") > think_end)


def _final_number(completion: str) -> Reading:
  last = None
  for last in _NUMBER_RE.finditer(completion):
    pass
  if last is None:
    return Reading(None, False)
  number = last.group().replace(",", "")
  if "." in number and set(number.split(".", 1)[1]) == {"0"}:  # "15.0" reads as 15
    number = number.split(".", 1)[0]
  return Reading(number, all(ch in _TRAILER for ch in completion[last.end():]))


def _boxed(completion: str) -> Reading:
  start = completion.rfind("\\boxed{")
  if start < 0:
    return Reading(None, False)
  depth, i = 1, start + len("\\boxed{")
  end = min(len(completion), i + MAX_BOXED_CHARS)
  while i < end:
    ch = completion[i]
    depth += (ch == "{") - (ch == "}")
    if depth == 0:
      return Reading(completion[start + len("\\boxed{"):i].strip(),
                     completion.count("\\boxed{") == 1)
    i += 1
  return Reading(None, False)


def _strip_emphasis(text: str) -> str:
  text = text.strip()
  for mark in ("**", "__", "`"):
    if len(text) >= 2 * len(mark) and text.startswith(mark) and text.endswith(mark):
      text = text[len(mark):-len(mark)].strip()
  return text


def _last_line(completion: str) -> Reading:
  marker = completion.lower().rfind("answer:")
  if marker >= 0:  # the text after the last "Answer:", which may span lines
    line_start = completion.rfind("\n", 0, marker) + 1
    before = completion[line_start:marker].strip(" \t*#_>").lower()
    body = completion[marker + len("answer:"):].strip()
    for mark in ("**", "__"):  # the marker's own emphasis closing: "**Answer:** 15"
      if body.startswith(mark) and body.count(mark) % 2 == 1:
        body = body[len(mark):]
    plain = _strip_emphasis(body)
    strict = before in ("", "final")
  else:
    text = completion.rstrip()
    plain = _strip_emphasis(text[text.rfind("\n") + 1:])
    folded = plain.casefold()
    for lead in _LEADS:
      if folded.startswith(lead):
        plain = plain[len(lead):].strip()
        break
    strict = False
  if "\n" not in plain and plain.endswith(".") and not plain.endswith(".."):
    plain = plain[:-1].rstrip()
  return Reading(plain or None, strict and bool(plain))


def _code_block(completion: str) -> Reading:
  end = completion.rfind(_FENCE)
  start = completion.rfind(_FENCE, 0, end) if end >= 0 else -1
  if start < 0:
    return Reading(None, False)
  body = completion[start + len(_FENCE):end]
  first_line, newline, rest = body.partition("\n")
  if newline and (not first_line.strip() or first_line.strip().isidentifier()):
    body = rest  # a language tag such as "python", "sql", "bash"
  return Reading(body.strip("\n"), completion.count(_FENCE) == 2)


def read(completion: str, answer_format: str) -> Reading:
  """The answer of `completion` in `answer_format`, and whether it follows it strictly."""
  if answer_format == "tags":
    return Reading(tag_content(completion), has_reasoning_format(completion))
  return {"final_number": _final_number, "boxed": _boxed, "last_line": _last_line,
          "code_block": _code_block}[check_format(answer_format)](completion)


def instruction(answer_format: str, what: str) -> str:
  """The sentence a prompt ends with to ask for `what` (e.g. "the final answer") in a format.

  The "tags" instruction is generic; domains keep their own wording for it.
  """
  return {
      "tags": f"Think in <think> </think> tags, then give only {what} in <answer> </answer> tags.",
      "final_number": f"End your response with {what} as a number.",
      "boxed": f"Put {what} in \\boxed{{}} at the end of your response.",
      "last_line": f"Give {what} on the last line, as 'Answer: ...'.",
      "code_block": f"Give {what} in one ``` fenced block.",
  }[check_format(answer_format)]


def render(answer_format: str, work: str, answer: str) -> str:
  """A response that shows `work` and then gives `answer` in `answer_format` (demonstrations).

  `read(render(f, work, answer), f)` gives `answer` back, strictly formatted,
  for any work text that holds no answer markers of its own.
  """
  if answer_format == "tags":
    return f"<think>{work}</think>\n<answer>{answer}</answer>"
  lead = f"{work}\n" if work else ""
  return lead + {"final_number": f"{answer}", "boxed": f"\\boxed{{{answer}}}",
                 "last_line": f"Answer: {answer}",
                 "code_block": f"{_FENCE}\n{answer}\n{_FENCE}"}[check_format(answer_format)]
