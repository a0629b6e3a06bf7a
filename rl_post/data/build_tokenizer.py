"""Builds the project's SentencePiece tokenizer from the `tokenizer` section."""

import dataclasses
import re

from absl import logging

from rl_post.config_sections import check, from_section
from rl_post.data.corpus import domain_corpus
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.data.tokenizer import SentencePieceTokenizer, train_sentencepiece
from rl_post.errors import ConfigError
from rl_post.output_paths import ensure_output_file

# SentencePiece's check that every corpus character (character_coverage=1.0), the
# specials and the tags fit: "Vocabulary size is smaller than required_chars. 290 vs 291."
_REQUIRED_CHARS_RE = re.compile(r"smaller than required_chars\D*(\d+) vs (\d+)")
# train_sentencepiece's own floor: "tokenizer vocab_size must be >= 279 (bytes + ...), got 200".
_FLOOR_RE = re.compile(r"vocab_size (must be >= \d+ \([^)]*\))")


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
  """Attributes:
    path: where the .model file is (written by `build`, read by trainers).
    vocab_size: pieces including 256 byte-fallback pieces and specials.
    corpus_examples: generated training lines.
    system_prompt: must stay empty: a SentencePiece tokenizer has no chat
      template to hold one (`rl_post.data.batching.configure_prompts`).
  """
  path: str = ""
  vocab_size: int = 384
  corpus_examples: int = 20_000
  system_prompt: str = ""

  def __post_init__(self):
    check(bool(self.path) and self.path.endswith(".model"), "path",
          "must be a file path ending in .model", self.path)
    check(self.corpus_examples > 0, "corpus_examples", "must be > 0", self.corpus_examples)
    check(not self.system_prompt, "system_prompt",
          "needs a tokenizer with a chat template; a SentencePiece one has none",
          self.system_prompt)


def build(config) -> SentencePieceTokenizer:
  """Trains the tokenizer on the configured domains; returns it loaded."""
  tok = from_section(TokenizerConfig, config.get("tokenizer"), "tokenizer")
  tasks = from_section(TaskConfig, config.get("tasks"), "tasks")
  ensure_output_file(tok.path, "tokenizer.path")
  mixture = TaskMixture(tasks, int(config.seed))
  lines = list(domain_corpus(mixture, tok.corpus_examples))
  tokenizer = SentencePieceTokenizer(_train(lines, tok))
  if tokenizer.vocab_size < tok.vocab_size:  # the corpus has fewer distinct pieces to learn
    logging.warning("tokenizer.vocab_size=%d: this corpus gives %d pieces (%d corpus lines); "
                    "model.vocab_size=0 takes the tokenizer's size", tok.vocab_size,
                    tokenizer.vocab_size, tok.corpus_examples)
  return tokenizer


def _train(lines: list[str], tok: TokenizerConfig) -> str:
  """`train_sentencepiece` with a too-small vocabulary or unwritable path as a ConfigError."""
  try:
    return train_sentencepiece(lines, tok.path[:-len(".model")], vocab_size=tok.vocab_size)
  except ValueError as e:
    match = _FLOOR_RE.search(str(e))
    if match is None:
      raise
    raise ConfigError("tokenizer.vocab_size", tok.vocab_size, match[1]) from None
  except RuntimeError as e:
    match = _REQUIRED_CHARS_RE.search(str(e))
    if match is None:
      raise
    raise ConfigError("tokenizer.vocab_size", tok.vocab_size,
                      f"must be >= {match[2]} for this corpus (every character in it, the "
                      "byte pieces, specials and tags need a piece)") from None
  except OSError as e:
    raise ConfigError("tokenizer.path", tok.path,
                      f"cannot be written ({e.strerror or e})") from None
