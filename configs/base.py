"""Shared defaults: one tiny model, the arithmetic domain, CPU-sized runs.

Not run directly; experiment configs import `get_base()` and change fields.
"""

import ml_collections

from rl_post.parallel.sharding import DEFAULT_RULES
from rl_post.rl import config as rl_config


def get_base(workroot: str = "/tmp/rl_post") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.mesh = dict(data=-1, fsdp=1, tensor=1, context=1)
  c.sharding_rules = DEFAULT_RULES
  c.tokenizer = dict(path=f"{workroot}/tokenizer/arithmetic.model", vocab_size=384,
                     corpus_examples=20_000)
  c.model = dict(vocab_size=0,  # 0: take the tokenizer's
                 num_layers=4, embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32,
                 mlp_dim=384, tie_embeddings=True, qkv_bias=False, attention_impl="auto")
  c.tasks = dict(domains=("arithmetic",), weights=(1.0,), difficulties=(1, 2, 3, 4),
                 domain_options=dict(arithmetic=dict(max_difficulty=5)), heldout_size=512)
  c.rewards = dict(outcome_weight=1.0, format_weight=0.1, timeout_s=10.0, num_workers=1)
  # rl.algorithm picks a registry entry; rl.<algorithm> holds its own settings.
  c.rl = rl_config.section_defaults()
  return c
