"""SFT of the tiny model on arithmetic demonstrations.

  python experiments/train_sft.py --config=configs/sft_arithmetic.py \
      --workdir=/tmp/rl_post/sft
  # CPU smoke run:
  python experiments/train_sft.py --config=configs/sft_arithmetic.py:tiny --workdir=/tmp/sft_tiny
"""

from configs import base
from rl_post.models.lora import LoraConfig


def get_config(variant: str = ""):
  c = base.get_base()
  c.sft = dict(num_steps=600, batch_size=64, max_len=96, checkpoint_every=100,
               packing=False, pack_row_multiple=4,
               lora=LoraConfig.section_defaults())  # rank 0: off (docs/models.md, LoRA)
  c.optimizer = dict(learning_rate=3e-3, schedule="cosine", warmup_steps=50, total_steps=600,
                     weight_decay=0.0, grad_clip_norm=1.0, state_dtype="float32")
  if variant == "tiny":
    c.model.update(num_layers=2, embed_dim=64, mlp_dim=128, head_dim=16)
    c.sft.update(num_steps=20, batch_size=16)
    c.optimizer.total_steps = 20
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
