"""The tool-call protocol: `<tool_call>{json}</tool_call>` -> `<tool_response>`.

A model turn ends with one tool call:

  <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>

and the environment answers with

  <tool_response>
  ...output, or "error (<kind>): <message>"...
  </tool_response>

Parsing is linear in the text: one `rfind` of the closing tag, one `rfind`
of the opening tag before it, one `json.loads` of the body (capped at
`max_call_chars`). Every defect becomes a `ProtocolError` with a kind from
`ERROR_KINDS`; nothing here raises on model output.

Tool output is data, never control. A response is text the model reads:
`as_text` makes any string encodable (bytes that are not UTF-8, e.g. file
names with stray bytes, carried as lone surrogates, become a visible
`\\xNN`), `bound` cuts a response, everything appended included, to
`max_output_chars` with a visible marker, and `text_encoder` encodes it
with the tokenizer's special tokens off, so a tool that prints
`<|im_end|>` or `</s>` yields those characters, never the template's turn
boundaries or end of sequence.
"""

import dataclasses
import json
import re
from typing import Any, Callable, Mapping

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"

# Every way a tool call can fail, as counted in the metrics.
ERROR_KINDS = (
    "malformed_json",   # body is not JSON (or nested too deeply)
    "bad_call",         # JSON but not {"name": str, "arguments": {...}}
    "call_too_long",    # body over max_call_chars
    "unknown_tool",     # name not offered by this environment
    "bad_arguments",    # missing, unexpected or wrongly typed arguments
    "output_truncated",  # the tool ran, its output was cut to the limit
    "timeout",          # the call ran out of its per-call time
    "budget_exhausted",  # the episode's tool time is spent; nothing ran
    "tool_error",       # the program exited non-zero / raised / hit memory
    "sandbox_error",    # the sandbox itself failed (counted, worker replaced)
)
# The kinds of a call that was well formed and whose tool ran, failing on its
# own terms (a test run whose tests fail exits non-zero: "tool_error").
RAN_KINDS = ("output_truncated", "timeout", "tool_error")


@dataclasses.dataclass(frozen=True)
class ToolCall:
  name: str
  arguments: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class ProtocolError:
  kind: str
  message: str

  def __post_init__(self):
    if self.kind not in ERROR_KINDS:
      raise ValueError(f"unknown error kind {self.kind!r}")


def parse_tool_call(text: str, max_call_chars: int = 16384):
  """The tool call that ends `text`, a ProtocolError, or None (no call).

  Only a call whose closing tag is the last tag of the text counts, since
  generation stops at `</tool_call>`; text after it is ignored.
  """
  close = text.rfind(CALL_CLOSE)
  if close < 0:
    return None
  open_ = text.rfind(CALL_OPEN, 0, close)
  if open_ < 0:
    return ProtocolError("bad_call", f"{CALL_CLOSE} without a preceding {CALL_OPEN}")
  body = text[open_ + len(CALL_OPEN):close]
  if len(body) > max_call_chars:
    return ProtocolError("call_too_long",
                         f"tool call is {len(body)} chars, the limit is {max_call_chars}")
  try:
    call = json.loads(body)
  except (ValueError, RecursionError) as e:
    return ProtocolError("malformed_json", f"tool call is not valid JSON: {str(e)[:200]}")
  if not isinstance(call, dict) or not isinstance(call.get("name"), str):
    return ProtocolError("bad_call",
                         'a tool call must be {"name": <str>, "arguments": {...}}')
  arguments = call.get("arguments", {})
  if not isinstance(arguments, dict) or set(call) - {"name", "arguments"}:
    return ProtocolError("bad_call",
                         'a tool call must be {"name": <str>, "arguments": {...}}')
  return ToolCall(call["name"], arguments)


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
  """The text a model emits to call `name` (used by scripted policies and SFT)."""
  return CALL_OPEN + json.dumps({"name": name, "arguments": dict(arguments)}) + CALL_CLOSE


def format_response(text: str) -> str:
  """What the environment appends after a call (before the model's next turn)."""
  return f"\n{RESPONSE_OPEN}\n{text}\n{RESPONSE_CLOSE}\n"


def format_error(error: ProtocolError) -> str:
  return f"error ({error.kind}): {error.message}"


_SURROGATE = re.compile("[\ud800-\udfff]")
TRUNCATED = "\n[... output truncated: {} more chars]"


def _visible(match) -> str:
  code = ord(match.group())
  # 0xDC80-0xDCFF: a byte that was not UTF-8, as Python's surrogateescape holds it
  return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def as_text(text: str) -> str:
  """`text` with every lone surrogate rendered visibly, so it encodes as UTF-8.

  A surrogate-escaped byte (U+DC80-U+DCFF, how `os.scandir` and the sandbox
  hold a file name that is not UTF-8) becomes the four characters `\\xNN`;
  any other lone surrogate becomes U+FFFD.
  """
  return _SURROGATE.sub(_visible, text)


def truncate(text: str, max_chars: int):
  """(text cut to at most max_chars characters, marker included; whether it was cut).

  The marker says how many characters were dropped; a `max_chars` too small
  for it keeps the first `max_chars` characters alone.
  """
  if len(text) <= max_chars:
    return text, False
  keep = max_chars
  while True:  # the marker's length grows with the count it shows; keep only shrinks
    marker = TRUNCATED.format(len(text) - keep)
    if keep + len(marker) <= max_chars:
      return text[:keep] + marker, True
    keep = max_chars - len(marker)
    if keep < 0:
      return text[:max_chars], True


def bound(output: str, note: str, max_chars: int):
  """The response text `output` + "\\n" + `note` in at most max_chars characters.

  Both parts go through `as_text`. The note (e.g. the files not kept) keeps
  up to half of the limit, so it survives a long output; what is cut carries
  the `truncate` marker. Returns (text, whether anything was cut).
  """
  output, note = as_text(output), as_text(note)
  if not note:
    return truncate(output, max_chars)
  note, note_cut = truncate(note, max(max_chars // 2, max_chars - len(output) - 1))
  output, output_cut = truncate(output, max(max_chars - len(note) - 1, 0))
  text = f"{output}\n{note}" if output else note
  return text[:max_chars], note_cut or output_cut or len(text) > max_chars


def text_encoder(tokenizer) -> Callable[[str], list]:
  """text -> ids for tool output: `as_text`, then the tokenizer's `encode_text`
  (special tokens off: their markers in the text encode as ordinary text).

  Raises:
    ValueError: the tokenizer has no `encode_text` (`rl_post.data.tokenizer.Tokenizer`).
  """
  encode_text = getattr(tokenizer, "encode_text", None)
  if not callable(encode_text):
    raise ValueError(f"{type(tokenizer).__name__} has no encode_text(text): tool output must "
                     "be encoded with special tokens off (rl_post.data.tokenizer.Tokenizer)")
  return lambda text: encode_text(as_text(text))
