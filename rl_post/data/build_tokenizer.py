"""Builds the project's SentencePiece tokenizer from the `tokenizer` section."""

import dataclasses
import os

from rl_post.config_sections import check, from_section
from rl_post.data.corpus import domain_corpus
from rl_post.data.mixture import TaskConfig, TaskMixture
from rl_post.data.tokenizer import SentencePieceTokenizer, train_sentencepiece


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
  """Attributes:
    path: where the .model file is (written by `build`, read by trainers).
    vocab_size: pieces including 256 byte-fallback pieces and specials.
    corpus_examples: generated training lines.
  """
  path: str = ""
  vocab_size: int = 384
  corpus_examples: int = 20_000

  def __post_init__(self):
    check(bool(self.path) and self.path.endswith(".model"), "path",
          "must be a file path ending in .model", self.path)
    check(self.corpus_examples > 0, "corpus_examples", "must be > 0", self.corpus_examples)


def build(config) -> SentencePieceTokenizer:
  """Trains the tokenizer on the configured domains; returns it loaded."""
  tok = from_section(TokenizerConfig, config.get("tokenizer"), "tokenizer")
  tasks = from_section(TaskConfig, config.get("tasks"), "tasks")
  mixture = TaskMixture(tasks, int(config.seed))
  lines = list(domain_corpus(mixture, tok.corpus_examples))
  os.makedirs(os.path.dirname(os.path.abspath(tok.path)), exist_ok=True)
  path = train_sentencepiece(lines, tok.path[:-len(".model")], vocab_size=tok.vocab_size)
  return SentencePieceTokenizer(path)
