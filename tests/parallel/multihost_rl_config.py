"""GRPO on the learnable ContainsDigit fixture for tests/parallel/test_multihost_rl.py.

A data=2 x fsdp=2 x tensor=2 mesh (8 devices: 2 processes x 4, or 1 x 8),
one reward worker per process, held-out evaluation at the last step.
"""

from configs import grpo_arithmetic


def get_config():
  c = grpo_arithmetic.get_config("tiny")
  c.mesh = dict(data=2, fsdp=2, tensor=2, context=1)
  c.tasks.update(domains=("rl_fixtures:ContainsDigit",), difficulties=(1,), domain_options={},
                 heldout_size=8)
  c.rl.update(num_steps=4, max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=8,
              checkpoint_every=2, eval_every=0)
  c.optimizer.learning_rate = 3e-3
  c.rewards.num_workers = 1
  return c
