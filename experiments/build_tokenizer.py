r"""Trains the SentencePiece tokenizer on generated task text.

  python experiments/build_tokenizer.py --config=configs/tokenizer.py \
      --config.tokenizer.path=/tmp/rl_post/tokenizer/arithmetic.model
"""

import _bootstrap  # noqa: F401
from absl import flags, logging
from ml_collections import config_flags

from rl_post import cli

from rl_post.data import build_tokenizer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)


def main(argv):
  del argv
  tokenizer = build_tokenizer.build(_CONFIG.value)
  logging.info("tokenizer with %d pieces written to %s", tokenizer.vocab_size,
               tokenizer.model_path)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  cli.run(main)
