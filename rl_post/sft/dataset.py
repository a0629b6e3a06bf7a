"""SFT on a fixed set of examples instead of domain demonstrations.

`sft.dataset` names a JSONL file, one example per line, of either kind:

  {"prompt": "...", "response": "..."}     single-turn: loss on the response + EOS
  {"messages": [{"role": "user", "content": "..."},
                {"role": "assistant", "content": "..."},
                {"role": "tool", "content": "..."}, ...,
                {"role": "assistant", "content": "..."}]}

(other keys are kept for the record and ignored here). Single-turn examples
are e.g. the verified samples that `rl_post.sft.rejection` collects for
rejection-sampling fine-tuning. A multi-turn example is a tool-use episode
(`rl_post.sft.episodes` writes the oracle's): the user message is the
episode's first observation, then assistant turns alternate with tool
responses, and it ends with an assistant turn. It is rendered exactly as
the RL episodes render it (`rl_post.sft.episodes.renderer`) with a loss mask
per token: 1 on the assistant turns, 0 on the prompt and tool responses.

Step t takes examples t*B ... t*B+B-1 of an endless stream that visits the
whole set once per epoch, in an order drawn per (seed, epoch), so a resumed
run sees the same batches.
"""

import dataclasses
import json

import numpy as np

from rl_post.errors import ConfigError

ROLES = ("user", "assistant", "tool")


@dataclasses.dataclass(frozen=True)
class Episode:
  """A multi-turn example: (role, content) per message; roles user, then assistant and
  tool alternating, ending with assistant."""
  messages: tuple[tuple[str, str], ...]

  @property
  def turns(self) -> list[str]:
    """The assistant turns (what the loss covers)."""
    return [content for role, content in self.messages if role == "assistant"]


Example = tuple[str, str] | Episode  # (prompt, response), or an episode


def episode_problem(messages) -> str:
  """Why `messages` (a JSON value) is not a valid episode, or "" when it is."""
  if not isinstance(messages, list) or len(messages) < 2:
    return "'messages' must be a list of at least two messages"
  for i, message in enumerate(messages):
    if not (isinstance(message, dict) and message.get("role") in ROLES
            and isinstance(message.get("content"), str)):
      return (f"message {i} must be an object with 'role' in {ROLES} and string 'content'")
    want = "user" if i == 0 else ("assistant" if i % 2 else "tool")
    if message["role"] != want:
      return (f"message {i} has role {message['role']!r} where {want!r} belongs (user, then "
              "assistant and tool alternating)")
  if messages[-1]["role"] != "assistant":
    return "the last message must be an assistant turn"
  return ""


def _example(record, number: int, field: str, path: str) -> Example:
  if isinstance(record, dict) and "messages" in record:
    problem = episode_problem(record["messages"])
    if problem:
      raise ConfigError(field, path, f"line {number}: {problem}")
    return Episode(tuple((m["role"], m["content"]) for m in record["messages"]))
  if not (isinstance(record, dict) and isinstance(record.get("prompt"), str)
          and isinstance(record.get("response"), str)):
    raise ConfigError(field, path, f"line {number} needs string 'prompt' and 'response' "
                      "fields, or 'messages' (a multi-turn episode)")
  return record["prompt"], record["response"]


def load_examples(path: str, field: str = "sft.dataset") -> list[Example]:
  """The examples of a JSONL file.

  Raises:
    ConfigError: on `field` for a missing or empty file, or a line that is
      not a JSON object with string "prompt" and "response", or with valid
      "messages" (naming the line and what is wrong).
  """
  try:
    with open(path, encoding="utf-8") as f:
      lines = f.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise ConfigError(field, path, f"cannot be read: {e}") from None
  examples = []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except ValueError as e:
      raise ConfigError(field, path, f"line {number} is not JSON: {e}") from None
    examples.append(_example(record, number, field, path))
  if not examples:
    raise ConfigError(field, path, "holds no examples")
  return examples


def pick(examples: list[Example], step: int, batch_size: int, seed: int) -> list[Example]:
  """The examples of SFT step `step`: the next `batch_size` of the epoch stream."""
  n = len(examples)
  out = []
  for position in range(step * batch_size, (step + 1) * batch_size):
    epoch, offset = divmod(position, n)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    out.append(examples[order[offset]])
  return out


def example_batch(examples: list[Example], step: int, batch_size: int,
                  seed: int) -> tuple[list[str], list[str]]:
  """(prompts, responses) of SFT step `step` over single-turn examples (`pick`).

  Raises:
    ValueError: the step's examples include an episode (use `pick`).
  """
  picked = pick(examples, step, batch_size, seed)
  if any(isinstance(e, Episode) for e in picked):
    raise ValueError("example_batch splits (prompt, response) pairs; this batch holds "
                     "multi-turn episodes: use pick()")
  return [p for p, _ in picked], [r for _, r in picked]
