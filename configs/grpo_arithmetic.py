"""GRPO on arithmetic, starting from the SFT export.

  python experiments/train_rl.py --config=configs/grpo_arithmetic.py \
      --workdir=/tmp/rl_post/grpo --config.rl.init_from=/tmp/rl_post/sft/export
  # CPU smoke run from a fresh init:
  python experiments/train_rl.py --config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/grpo_tiny
"""

from configs import base


def get_config(variant: str = ""):
  c = base.get_base()
  c.rl.update(num_steps=150, max_prompt_len=24, eval_every=50, checkpoint_every=25)
  c.rl.grpo.update(clip_high=0.28, aggregation="token_mean")  # clip-higher, token-level loss
  c.optimizer = dict(learning_rate=2e-4, schedule="constant", warmup_steps=0, total_steps=150,
                     weight_decay=0.0, grad_clip_norm=1.0, state_dtype="float32")
  if variant == "tiny":
    c.model.update(num_layers=2, embed_dim=64, mlp_dim=128, head_dim=16)
    c.rl.update(num_steps=4, batch_size=4, num_generations=4, max_new_tokens=16, eval_every=0,
                checkpoint_every=2)
    c.tasks.heldout_size = 16
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  else:  # straight-line layers: a faster update on CPU for a little more compile time
    c.rl.unroll_layers = c.model.num_layers
  return c
