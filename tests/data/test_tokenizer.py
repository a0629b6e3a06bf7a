"""SentencePiece tokenizer: exact round trip, atomic tags, split digits."""

import numpy as np
import pytest

from rl_post.data.tokenizer import TAGS, train_sentencepiece


def test_round_trip_is_exact(tokenizer):
  rng = np.random.default_rng(0)
  alphabet = list("0123456789+-=?<>/ \n\tabcXYZ,.") + ["é", "✓", "日本", "\x00", "  ", "\r\n"]
  samples = ["What is 472+389?\n<think>2+9+0=1,1</think>\n<answer>861</answer>",
             "  leading and trailing spaces  ", "", "\n\n\n", "<tool_call>{\"a\": 1}</tool_call>"]
  samples += ["".join(rng.choice(alphabet, size=rng.integers(1, 40))) for _ in range(200)]
  for text in samples:
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tags_and_newline_are_atomic_and_digits_split(tokenizer):
  for tag in TAGS + ("\n",):
    ids = tokenizer.encode(tag)
    assert len(ids) == 1, (tag, [tokenizer.piece(i) for i in ids])
  pieces = [tokenizer.piece(i) for i in tokenizer.encode("123456")]
  assert pieces == list("123456")
  assert tokenizer.decode([tokenizer.bos_id] + tokenizer.encode("7") + [tokenizer.eos_id]) == "7"


def test_bad_inputs(tmp_path):
  with pytest.raises(ValueError, match="tokenizer corpus is empty"):
    train_sentencepiece([], str(tmp_path / "x"), vocab_size=400)
  with pytest.raises(ValueError, match="vocab_size must be >="):
    train_sentencepiece(["a"], str(tmp_path / "x"), vocab_size=100)
  from rl_post.data.tokenizer import SentencePieceTokenizer
  with pytest.raises(FileNotFoundError, match="build it with experiments/build_tokenizer.py"):
    SentencePieceTokenizer(str(tmp_path / "missing.model"))


def test_a_vocab_size_the_corpus_cannot_fill_is_a_warning(tmp_path, caplog):
  from configs import base
  from rl_post.data import build_tokenizer
  config = base.get_base()
  config.tokenizer.update(path=str(tmp_path / "t.model"), corpus_examples=500, vocab_size=2000)
  with caplog.at_level("WARNING"):
    tokenizer = build_tokenizer.build(config)
  assert tokenizer.vocab_size < 2000
  assert (f"tokenizer.vocab_size=2000: this corpus gives {tokenizer.vocab_size} pieces"
          in caplog.text)
