"""Builds the arithmetic SentencePiece tokenizer.

  python experiments/build_tokenizer.py --config=configs/tokenizer.py
"""

from configs import base


def get_config():
  return base.get_base()
