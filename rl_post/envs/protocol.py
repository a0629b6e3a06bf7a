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
"""

import dataclasses
import json
from typing import Any, Mapping

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


def truncate(text: str, max_chars: int):
  """(text cut to max_chars with a note, whether it was cut)."""
  if len(text) <= max_chars:
    return text, False
  note = f"\n[... output truncated: {len(text) - max_chars} more chars]"
  return text[:max_chars] + note, True
