"""The end-to-end demo: tokenizer -> SFT -> GRPO -> held-out evaluation.

  python experiments/demo.py --workdir=/tmp/rl_post_demo
  python experiments/demo.py --config=configs/demo.py:tiny --workdir=/tmp/demo_tiny
"""

from configs import base


def get_config(variant: str = ""):
  c = base.get_base()
  c.tokenizer.path = "{workdir}/tokenizer/arithmetic.model"
  # Column addition of 2- and 3-digit numbers. SFT demonstrations come from a
  # careless teacher that drops the incoming carry in 30% of columns: the
  # base model imitates the slips, and RL against the exact verifier has to
  # unlearn them.
  c.tasks.difficulties = (2, 3)
  c.tasks.heldout_size = 400
  c.tasks.domain_options.arithmetic.update(operations="+", demo_slip_rate=0.3)
  c.sft = dict(num_steps=300, batch_size=64, max_len=64, checkpoint_every=100)
  c.sft_optimizer = dict(learning_rate=3e-3, schedule="cosine", warmup_steps=30,
                         total_steps=300, weight_decay=0.0, grad_clip_norm=1.0)
  c.rl.update(num_steps=100, max_prompt_len=16, max_new_tokens=40, checkpoint_every=25)
  c.rl.grpo.update(clip_high=0.28, aggregation="token_mean")  # clip-higher, token-level loss
  c.optimizer = dict(learning_rate=1e-4, schedule="constant", warmup_steps=5, total_steps=100,
                     b2=0.99, weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    c.model.update(num_layers=2, embed_dim=64, mlp_dim=128, head_dim=16)
    c.tokenizer.corpus_examples = 2000
    c.sft.update(num_steps=10, batch_size=16)
    c.sft_optimizer.total_steps = 10
    c.rl.update(num_steps=3, batch_size=4, num_generations=4, max_new_tokens=24)
    c.tasks.heldout_size = 16
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
