"""Hugging Face `tokenizers` tokenizers: from tokenizer.json or GGUF metadata.

  tok = load_tokenizer("/ckpt/Qwen2.5-0.5B")          # HF dir or tokenizer.json
  tok = load_tokenizer("SmolLM2-135M-Instruct.Q4_1.gguf")
  tok = load_tokenizer("/tmp/rl_post/tokenizer/arithmetic.model")  # SentencePiece
  ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Hi"}]))

Every tokenizer returned follows `rl_post.data.tokenizer.Tokenizer`: ids in,
text out, plus `apply_chat_template`. A GGUF file carries a byte-level BPE
vocabulary and merges, its special tokens and a Jinja chat template; we
rebuild the same `tokenizers.Tokenizer` the original tokenizer.json held.
"""

import json
import os
from typing import Mapping, Sequence

from rl_post.data import chat_template as chat_templates
from rl_post.data.tokenizer import SentencePieceTokenizer

# Pre-tokenizer split patterns of llama.cpp's `tokenizer.ggml.pre` types.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLITS = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}
_BYTE_LEVEL_PRE = ("default", "gpt2", "smollm")
_CONTROL, _USER_DEFINED = 3, 4   # llama.cpp token types


class HFTokenizer:
  """A `tokenizers.Tokenizer` with special ids and a chat template.

  Attributes:
    vocab_size: number of ids (base vocabulary plus added tokens).
    pad_id, bos_id, eos_id: special ids (-1 when the tokenizer has none).
    chat_template: Jinja template used by `apply_chat_template`.
    chat_prompts: task prompts become a user turn of the chat template
      (`rl_post.data.batching.prompt_ids`); on when the tokenizer ships a
      template, as pretrained chat models do.
  """

  def __init__(self, tokenizer, *, eos_id: int, bos_id: int = -1, pad_id: int | None = None,
               chat_template: str | None = None, chat_prompts: bool | None = None):
    self._tok = tokenizer
    self.chat_prompts = bool(chat_template) if chat_prompts is None else chat_prompts
    self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    self.eos_id = int(eos_id)
    self.bos_id = int(bos_id)
    self.pad_id = self.eos_id if pad_id is None or pad_id < 0 else int(pad_id)
    self.chat_template = chat_template or chat_templates.CHATML
    self._special_ids = {t for t in (self.pad_id, self.bos_id, self.eos_id) if t >= 0}
    self._plain = None  # the tokenizer that encodes special-token markers as text

  @property
  def backend(self):
    """The underlying `tokenizers.Tokenizer`."""
    return self._tok

  def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
    return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

  def encode_text(self, text: str) -> list[int]:
    """`text` as plain text: special-token markers in it (e.g. `<|im_end|>`)
    are split into ordinary tokens, as `tokenizers`' `encode_special_tokens`
    does; lone surrogates are replaced. For text from outside (tool output)."""
    if self._plain is None:  # a copy, so the flag never changes how `encode` reads text
      from tokenizers import Tokenizer
      plain = Tokenizer.from_str(self._tok.to_str())
      plain.encode_special_tokens = True
      self._plain = plain
    text = text.encode("utf-8", "replace").decode("utf-8")
    return self._plain.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
    return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def piece(self, token_id: int) -> str:
    return self._tok.id_to_token(int(token_id))

  def token_id(self, piece: str) -> int:
    token_id = self._tok.token_to_id(piece)
    if token_id is None:
      raise ValueError(f"token {piece!r} is not in the vocabulary")
    return token_id

  def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *,
                          add_generation_prompt: bool = True) -> str:
    """The prompt text for `messages` ([{"role", "content"}, ...])."""
    return chat_templates.render(
        self.chat_template, messages, add_generation_prompt=add_generation_prompt,
        bos_token=self.piece(self.bos_id) if self.bos_id >= 0 else "",
        eos_token=self.piece(self.eos_id))


# ----------------------------------------------------------------------------- tokenizer.json


def _token_content(value):
  if isinstance(value, dict):
    return value.get("content")
  return value


def from_tokenizer_json(path: str) -> HFTokenizer:
  """From a HF checkpoint dir or a tokenizer.json (reads tokenizer_config.json beside it)."""
  from tokenizers import Tokenizer
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
  if not os.path.exists(file):
    raise FileNotFoundError(f"no tokenizer.json at {file!r}")
  try:
    tok = Tokenizer.from_file(file)
  except Exception as e:  # tokenizers raises a bare Exception on a malformed file
    raise ValueError(f"{file} is not a valid tokenizer.json ({e})") from e
  settings = {}
  config_path = os.path.join(directory, "tokenizer_config.json")
  if os.path.exists(config_path):
    with open(config_path) as f:
      settings = json.load(f)
    if not isinstance(settings, dict):
      raise ValueError(f"{config_path} is not a JSON object")
  template = settings.get("chat_template")
  jinja_path = os.path.join(directory, "chat_template.jinja")
  if template is None and os.path.exists(jinja_path):
    with open(jinja_path) as f:
      template = f.read()
  if isinstance(template, list):  # named templates: take "default"
    template = next((t["template"] for t in template if t.get("name") == "default"), None)

  def special(key):
    content = _token_content(settings.get(key))
    token_id = None if content is None else tok.token_to_id(content)
    return -1 if token_id is None else token_id

  eos = special("eos_token")
  if eos < 0:
    raise ValueError(f"cannot find the eos token for {file!r}: tokenizer_config.json needs "
                     "an 'eos_token' that is in the vocabulary")
  return HFTokenizer(tok, eos_id=eos, bos_id=special("bos_token"), pad_id=special("pad_token"),
                     chat_template=template)


# ----------------------------------------------------------------------------- GGUF


def from_gguf(path_or_reader) -> HFTokenizer:
  """Rebuilds the tokenizer stored in a GGUF file's metadata (byte-level BPE)."""
  from rl_post.models import gguf as gguf_model
  reader = (gguf_model.open_reader(path_or_reader) if isinstance(path_or_reader, str)
            else path_or_reader)
  meta = lambda key, default=None: gguf_model.metadata(reader, f"tokenizer.{key}", default)
  kind = meta("ggml.model")
  if kind != "gpt2":
    raise ValueError(f"unsupported GGUF tokenizer model {kind!r}; supported: 'gpt2' "
                     "(byte-level BPE)")
  tokens = meta("ggml.tokens")
  merges = meta("ggml.merges")
  if not tokens or merges is None:
    raise ValueError("GGUF metadata is missing tokenizer.ggml.tokens or tokenizer.ggml.merges")
  types = meta("ggml.token_type") or [1] * len(tokens)
  tok = _byte_level_bpe(tokens, merges, types, meta("ggml.pre", "default"))
  return HFTokenizer(tok, eos_id=meta("ggml.eos_token_id", -1),
                     bos_id=meta("ggml.bos_token_id", -1),
                     pad_id=meta("ggml.padding_token_id", -1),
                     chat_template=meta("chat_template"))


def _byte_level_bpe(tokens, merges, types, pre: str):
  from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
  vocab = {}
  for i, token in enumerate(tokens):
    vocab.setdefault(token, i)
  pairs = [tuple(m.split(" ", 1)) for m in merges]
  tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
  if pre in _SPLITS:
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  elif pre in _BYTE_LEVEL_PRE:
    steps = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if pre == "smollm":  # SmolLM splits every digit
      steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
  else:
    raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}; supported: "
                     f"{sorted(set(_SPLITS) | set(_BYTE_LEVEL_PRE))}")
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t, kind in zip(tokens, types) if kind == _CONTROL])
  tok.add_tokens([AddedToken(t, special=False, normalized=False)
                  for t, kind in zip(tokens, types) if kind == _USER_DEFINED])
  return tok


# ----------------------------------------------------------------------------- dispatch


def load_tokenizer(path: str):
  """A tokenizer for `path`: .model (SentencePiece), .gguf, tokenizer.json or a HF dir."""
  if path.endswith(".model"):
    return SentencePieceTokenizer(path)
  if path.endswith(".gguf"):
    return from_gguf(path)
  if os.path.isdir(path) or path.endswith(".json"):
    return from_tokenizer_json(path)
  raise ValueError(f"unknown tokenizer path {path!r}: expected a SentencePiece .model, a "
                   ".gguf file, a tokenizer.json or a HF checkpoint directory")
