"""Which tokenizer a model was trained with: a fingerprint kept with its params.

A model trained with one tokenizer and run with another of the same size
produces garbage without any error: every id means another piece. So exports
(`export/tokenizer_fingerprint.json`) and training checkpoints (their extra
dict, key "tokenizer") record the tokenizer's fingerprint, and whatever
loads them with a tokenizer (`rl.init_from`, a resumed run, `evaluate.py`)
checks it. Exports and checkpoints written before fingerprints existed carry
none and are not checked.

    fp = tokenizer_fingerprint.of(tokenizer)        # {"vocab_size", "sha256"}
    tokenizer_fingerprint.check(stored, tokenizer, "rl.init_from", path, tokenizer_path)
"""

import hashlib
import json
import os
from typing import Any

from rl_post.errors import ConfigError

FILENAME = "tokenizer_fingerprint.json"


def of(tokenizer) -> dict:
  """{"vocab_size", "sha256"}: the digest covers every piece in id order (`piece(i)`
  where the tokenizer has it, else `decode([i])`) and the special ids."""
  piece = getattr(tokenizer, "piece", None) or (lambda i: tokenizer.decode([i]))
  digest = hashlib.sha256()
  for i in range(tokenizer.vocab_size):
    digest.update(piece(i).encode("utf-8", "surrogatepass") + b"\0")
  specials = tuple(getattr(tokenizer, name, None) for name in ("pad_id", "bos_id", "eos_id"))
  digest.update(repr(specials).encode())  # (the call-vocabulary tokenizer has no bos_id)
  return {"vocab_size": int(tokenizer.vocab_size), "sha256": digest.hexdigest()}


def write(directory: str, tokenizer) -> str:
  """Writes `directory/tokenizer_fingerprint.json`; returns its path."""
  path = os.path.join(directory, FILENAME)
  with open(path, "w") as f:
    json.dump(of(tokenizer), f, indent=2)
  return path


def read(directory: str) -> dict | None:
  """The fingerprint stored in `directory`, or None (an export from before fingerprints,
  or a file that is not one)."""
  try:
    with open(os.path.join(directory, FILENAME)) as f:
      stored = json.load(f)
  except (OSError, ValueError):
    return None
  return stored if isinstance(stored, dict) and "sha256" in stored else None


def check(stored: dict | None, tokenizer, what: str, where: Any, tokenizer_path: Any):
  """Raises ConfigError on `tokenizer.path` when `stored` (a fingerprint, or None: not
  checked) is not `tokenizer`'s; `what`/`where` name the model's source in the message."""
  if not stored:
    return
  current = of(tokenizer)
  if stored.get("sha256") == current["sha256"]:
    return
  sizes = (f"{stored.get('vocab_size')} pieces, this one {current['vocab_size']}"
           if stored.get("vocab_size") != current["vocab_size"]
           else f"both {current['vocab_size']} pieces, but not the same ones")
  raise ConfigError("tokenizer.path", tokenizer_path,
                    f"is not the tokenizer the model at {what}={where!r} was trained with "
                    f"(that one had {sizes}); every token id would mean another piece")
