"""DAPO on arithmetic: clip-higher, token-level loss, overlong shaping, dynamic sampling.

  python experiments/train_rl.py --config=configs/dapo_arithmetic.py \
      --workdir=/tmp/rl_post/dapo --config.rl.init_from=/tmp/rl_post/sft/export
  # CPU smoke run from a fresh init:
  python experiments/train_rl.py --config=configs/dapo_arithmetic.py:tiny --workdir=/tmp/dapo_tiny
"""

from configs import grpo_arithmetic


def get_config(variant: str = ""):
  c = grpo_arithmetic.get_config(variant)
  c.rl.algorithm = "dapo"
  c.rl.dapo.overlong_buffer = c.rl.max_new_tokens // 4
  c.filtering.enabled = True  # refill the batch with groups whose rewards differ
  return c
