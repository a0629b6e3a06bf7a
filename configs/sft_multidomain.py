"""SFT on the demonstrations of the multi-domain mixture (configs/grpo_multidomain.py).

Teaches the tiny model each domain's answer format (<think>/<answer>, fenced
code and SQL) before GRPO; the same tokenizer, model and tasks as the RL run.

  python experiments/train_sft.py --config=configs/sft_multidomain.py \
      --workdir=/tmp/rl_post/multi_sft
  # CPU smoke run:
  python experiments/train_sft.py --config=configs/sft_multidomain.py:tiny \
      --workdir=/tmp/multi_sft_tiny
"""

from configs import base, grpo_multidomain


def get_config(variant: str = ""):
  c = grpo_multidomain.common(base.get_base(), variant)
  # The longest prompt + demonstration at levels 1-2 is ~380 tokens (extraction).
  c.sft = dict(num_steps=120, batch_size=16, max_len=400, checkpoint_every=60,
               packing=False, pack_row_multiple=4)
  c.optimizer = dict(learning_rate=3e-3, schedule="cosine", warmup_steps=12, total_steps=120,
                     weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    # Longer (level-2) demonstrations are dropped and counted (sft/dropped).
    c.sft.update(num_steps=40, batch_size=8, max_len=256, checkpoint_every=40)
    c.optimizer.update(total_steps=40, warmup_steps=4)
  return c
