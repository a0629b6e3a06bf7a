"""Builds the arithmetic SentencePiece tokenizer.

  python experiments/build_tokenizer.py --config=configs/tokenizer.py
  # CPU smoke run (a smaller corpus):
  python experiments/build_tokenizer.py --config=configs/tokenizer.py:tiny \
      --config.tokenizer.path=/tmp/tok_tiny/arithmetic.model
"""

from configs import base


def get_config(variant: str = ""):
  c = base.get_base()
  if variant == "tiny":
    c.tokenizer.corpus_examples = 2000
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
