r"""The end-to-end demo: tokenizer -> SFT -> GRPO -> held-out evaluation.

  python experiments/demo.py --workdir=/tmp/rl_post_demo
  python experiments/demo.py --config=configs/demo.py:tiny --workdir=/tmp/demo_tiny

Prints the held-out completion rate before and after RL and writes
workdir/report/{summary.md,summary.json,reward.png}.
"""

import os

import _bootstrap  # noqa: F401
from absl import flags
from ml_collections import config_flags

from rl_post import cli, pipeline

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(_bootstrap.ROOT, "configs", "demo.py"), "Config file.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/rl_post_demo", "Run directory.")


def main(argv):
  del argv
  result = pipeline.run(_CONFIG.value, _WORKDIR.value)
  with open(result["report"]["summary_md"]) as f:
    print(f.read())
  print(f"report: {os.path.dirname(result['report']['summary_md'])}")


if __name__ == "__main__":
  cli.run(main)
