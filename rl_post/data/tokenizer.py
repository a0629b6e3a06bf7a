"""Tokenizers: a SentencePiece model trained by our own code.

The model splits digits, keeps the reasoning/tool tags and the newline as
single atomic pieces, falls back to bytes for anything unseen, and performs
no normalisation, so `decode(encode(text)) == text` for every string.
"""

import dataclasses
import io
import os
from typing import Iterable, Mapping, Protocol, Sequence

import sentencepiece as spm

from rl_post.data import chat_template as chat_template_lib

TAGS = ("<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>",
        "<tool_response>", "</tool_response>")
NEWLINE = "\n"
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class Tokenizer(Protocol):
  """What the library needs from any tokenizer."""
  vocab_size: int
  pad_id: int
  bos_id: int
  eos_id: int

  def encode(self, text: str) -> list[int]: ...

  def encode_text(self, text: str) -> list[int]:
    """`text` as plain text: markers of special tokens in it (e.g. `</s>`,
    `<|im_end|>`) become ordinary tokens, never special ids. Tool output in
    episodes is encoded with it."""

  def decode(self, ids: Sequence[int]) -> str: ...

  def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *,
                          add_generation_prompt: bool = True) -> str: ...


@dataclasses.dataclass
class SentencePieceTokenizer:
  """A loaded SentencePiece model.

  `chat_template` (Jinja, see `rl_post.data.chat_template`) defaults to plain
  "role: content" lines, since our vocabularies have no chat tokens.
  """
  model_path: str
  chat_template: str = chat_template_lib.PLAIN

  def __post_init__(self):
    if not os.path.exists(self.model_path):
      raise FileNotFoundError(f"tokenizer model {self.model_path!r} does not exist; "
                              "build it with experiments/build_tokenizer.py")
    try:
      self._sp = spm.SentencePieceProcessor(model_file=self.model_path)
    except RuntimeError as e:  # sentencepiece's parse error on a cut-off or foreign file
      raise ValueError(f"tokenizer model {self.model_path!r} is truncated or not a "
                       f"SentencePiece model ({e})") from e
    self.vocab_size = self._sp.get_piece_size()
    self.pad_id, self.bos_id, self.eos_id = self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id()

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def encode_text(self, text: str) -> list[int]:
    """`encode` for text from outside (tool output): the control ids (pad,
    unk, bos, eos) never come from text in SentencePiece, and lone
    surrogates, which it cannot take, are replaced first."""
    return self._sp.encode(text.encode("utf-8", "replace").decode("utf-8"))

  def decode(self, ids: Sequence[int]) -> str:
    # Ids past the vocabulary are the model's padding rows (its vocab is
    # rounded up to a multiple of mesh.tensor): they carry no text.
    specials = (self.pad_id, self.bos_id, self.eos_id)
    return self._sp.decode([int(i) for i in ids
                            if int(i) not in specials and 0 <= int(i) < self.vocab_size])

  def piece(self, token_id: int) -> str:
    return self._sp.id_to_piece(int(token_id))

  def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *,
                          add_generation_prompt: bool = True) -> str:
    return chat_template_lib.render(self.chat_template, messages,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token="", eos_token="")


def train_sentencepiece(lines: Iterable[str], model_prefix: str, *, vocab_size: int,
                        model_type: str = "bpe") -> str:
  """Trains a SentencePiece model on `lines`; returns the .model path.

  `vocab_size` is an upper bound: a small corpus yields fewer pieces.

  Newlines inside a line are kept (the trainer reads our iterator, not a
  file), and `max_sentence_length` is raised so long lines are not dropped.
  """
  lines = [line for line in lines if line]
  if not lines:
    raise ValueError("tokenizer corpus is empty")
  min_vocab = 256 + 4 + len(TAGS) + 1 + 10
  if vocab_size < min_vocab:
    raise ValueError(f"tokenizer vocab_size must be >= {min_vocab} "
                     f"(bytes + specials + tags + digits), got {vocab_size}")
  os.makedirs(os.path.dirname(os.path.abspath(model_prefix)), exist_ok=True)
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
      model_type=model_type, character_coverage=1.0, byte_fallback=True,
      split_digits=True, user_defined_symbols=list(TAGS) + [NEWLINE],
      normalization_rule_name="identity", add_dummy_prefix=False,
      remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
      split_by_whitespace=True, max_sentence_length=1 << 20,
      pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
      hard_vocab_limit=False, num_threads=2, minloglevel=2)
  path = model_prefix + ".model"
  with open(path, "wb") as f:
    f.write(model.getvalue())
  return path
