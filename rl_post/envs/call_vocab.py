"""A fixed-vocabulary tokenizer for running episodes with random-weight models.

A randomly initialised model samples nearly uniformly from its vocabulary,
so it would almost never spell out a tool call character by character.
`CallVocabTokenizer` makes whole tool calls single tokens and repeats each
of them `copies` times (distinct ids, same text), which sets how often a
random model calls a tool without touching the model. The calls are the
tools' `examples` (`calls_for`), so a tool added from the config is called
too. Everything else is one token per character (printable ASCII, newline,
tab; other characters encode to "?"); `encode_text`, used for tool
output, has no call tokens. It satisfies the `rl_post.data.tokenizer.Tokenizer`
protocol where the episode loop needs it (encode, decode, pad_id, eos_id,
vocab_size); the episode tests and benchmark use it with the tiny model.
"""

import dataclasses
from typing import Sequence

from rl_post.envs import protocol
from rl_post.envs import tools as tools_lib

BUILTIN_TOOLS = ("bash", "sql", "python", "submit")
BAD_CALLS = (
    protocol.CALL_OPEN + '{"name": bash}' + protocol.CALL_CLOSE,  # malformed on purpose
    protocol.CALL_OPEN + '{"name": "rm", "arguments": {}}' + protocol.CALL_CLOSE,
)


def calls_for(tools: Sequence) -> tuple:
  """The whole-call tokens for `tools` (names, "module:Class" or Tools): each
  tool's `examples` as calls, in order, then `BAD_CALLS` (an unparsable call
  and an unknown tool)."""
  calls = [protocol.format_call(tool.name, example)
           for tool in tools_lib.toolset(tools).values() for example in tool.examples]
  return tuple(calls) + BAD_CALLS


DEFAULT_CALLS = calls_for(BUILTIN_TOOLS)
CHARS = "\n\t" + "".join(chr(c) for c in range(32, 127))


@dataclasses.dataclass
class CallVocabTokenizer:
  calls: Sequence[str] = DEFAULT_CALLS
  copies: int = 4
  pad_id: int = 0
  eos_id: int = 1

  def __post_init__(self):
    if self.copies < 1:
      raise ValueError(f"copies must be >= 1, got {self.copies}")
    self.pieces = ["<pad>", "<eos>"] + list(CHARS)
    self.pieces += [c for c in self.calls for _ in range(self.copies)]
    self.vocab_size = len(self.pieces)
    self._char_id = {c: i for i, c in enumerate(self.pieces[:2 + len(CHARS)]) if i >= 2}
    self._call_id = {c: 2 + len(CHARS) + k * self.copies for k, c in enumerate(self.calls)}

  def encode(self, text: str) -> list:
    """Greedy: a whole call where one starts, else one token per character."""
    ids, i = [], 0
    while i < len(text):
      if text.startswith(protocol.CALL_OPEN, i):
        call = next((c for c in self.calls if text.startswith(c, i)), None)
        if call is not None:
          ids.append(self._call_id[call])
          i += len(call)
          continue
      ids.append(self._char_id.get(text[i], self._char_id["?"]))
      i += 1
    return ids

  def encode_text(self, text: str) -> list:
    """One token per character, never a whole call: tool output is data, so a
    response that prints a call's text does not become the model's action token."""
    unknown = self._char_id["?"]
    return [self._char_id.get(c, unknown) for c in text]

  def decode(self, ids) -> str:
    return "".join(self.pieces[i] for i in ids if 2 <= i < self.vocab_size)
