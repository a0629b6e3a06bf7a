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
  # Multi-host: "off" | "auto" (TPU slice, SLURM, RL_POST_* env) | "explicit" (docs/scale.md).
  c.distributed = dict(mode="off", coordinator_address="", num_processes=0, process_id=-1,
                       local_device_ids=(), timeout_s=300)
  c.sharding_rules = DEFAULT_RULES
  c.tokenizer = dict(path=f"{workroot}/tokenizer/arithmetic.model", vocab_size=384,
                     corpus_examples=20_000)
  c.model = dict(vocab_size=0,  # 0: take the tokenizer's
                 num_layers=4, embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32,
                 mlp_dim=384, tie_embeddings=True, qkv_bias=False, attention_impl="auto")
  c.tasks = dict(domains=("arithmetic",), weights=(1.0,), difficulties=(1, 2, 3, 4),
                 domain_options=dict(arithmetic=dict(max_difficulty=5)), heldout_size=512,
                 floors=(), difficulty_ratios=(),
                 curriculum=dict(enabled=False, low=0.2, high=0.8, window=64, width=2, start=0),
                 eval_sets=(), eval_data_dir="")
  c.filtering = dict(enabled=False, max_rounds=2)
  c.rewards = dict(weights=dict(default=dict(outcome=1.0, format=0.1)), timeout_s=30.0,
                   num_workers=1, batch_timeout_s=0.0,  # 0: no deadline per batch
                   sandbox=dict(isolation="strict", num_workers=2, timeout_s=10.0))
  # rl.algorithm picks a registry entry; rl.<algorithm> holds its own settings.
  c.rl = rl_config.section_defaults()
  # Non-finite loss/gradients: skip the update; after max_nonfinite_steps such steps in a
  # row roll back to the last good checkpoint; stop after max_rollbacks (docs/reliability.md).
  c.guard = dict(max_nonfinite_steps=3, max_rollbacks=2)
  # Fault injection for reliability tests (rl_post/training/faults.py); empty: none.
  # Persistent XLA compilation cache shared by runs: "auto" ($RL_POST_COMPILE_CACHE, else
  # ~/.cache/rl_post/jax), "" (off) or a directory (rl_post/training/compile_cache.py).
  c.compile = dict(cache_dir="auto", min_compile_s=0.0)
  c.faults = dict(nonfinite_loss_at_steps=(), kill_at_steps=(), sigterm_at_steps=(),
                  corrupt_checkpoint_at_steps=(), corruption="flip")
  return c
