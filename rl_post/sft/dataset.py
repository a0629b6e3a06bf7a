"""SFT on a fixed set of (prompt, response) examples instead of domain demonstrations.

`sft.dataset` names a JSONL file, one example per line:
{"prompt": "...", "response": "...", ...} (other keys are kept for the
record and ignored here), e.g. the verified samples that
`rl_post.sft.rejection` collects for rejection-sampling fine-tuning. Step t
takes examples t*B ... t*B+B-1 of an endless stream that visits the whole
set once per epoch, in an order drawn per (seed, epoch), so a resumed run
sees the same batches.
"""

import json

import numpy as np

from rl_post.errors import ConfigError

Example = tuple[str, str]  # (prompt, response)


def load_examples(path: str, field: str = "sft.dataset") -> list[Example]:
  """The examples of a JSONL file.

  Raises:
    ConfigError: on `field` for a missing or empty file, or a line that is
      not a JSON object with string "prompt" and "response" (naming the line).
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
    if not (isinstance(record, dict) and isinstance(record.get("prompt"), str)
            and isinstance(record.get("response"), str)):
      raise ConfigError(field, path, f"line {number} needs string 'prompt' and 'response' "
                        "fields")
    examples.append((record["prompt"], record["response"]))
  if not examples:
    raise ConfigError(field, path, "holds no examples")
  return examples


def example_batch(examples: list[Example], step: int, batch_size: int,
                  seed: int) -> tuple[list[str], list[str]]:
  """(prompts, responses) of SFT step `step`: the next `batch_size` of the epoch stream."""
  n = len(examples)
  out = []
  for position in range(step * batch_size, (step + 1) * batch_size):
    epoch, offset = divmod(position, n)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    out.append(examples[order[offset]])
  return [p for p, _ in out], [r for _, r in out]
