r"""GRPO (and variants) on verifiable rewards.

  python experiments/train_rl.py --config=configs/grpo_arithmetic.py \
      --workdir=/tmp/rl_post/grpo --config.rl.init_from=/tmp/rl_post/sft/export \
      --config.rl.num_generations=16
"""

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli

from rl_post.rl import trainer

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (rerun to resume).")


def main(argv):
  del argv
  trainer.train(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
