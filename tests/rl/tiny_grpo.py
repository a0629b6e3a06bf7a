"""The tiny GRPO run the trainer-level tests in tests/rl share (the digit domain)."""

from configs import grpo_arithmetic
from rl_fixtures import DIGIT_DOMAIN


def tiny_digit_config(tokenizer_path: str, **rl_overrides):
  """grpo_arithmetic:tiny on the trivially learnable digit domain, 4 prompts x G=4,
  KL 0.05, lr 3e-3; `rl_overrides` update the `rl` section."""
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=0)
  c.rl.update(max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=4,
              checkpoint_every=2, eval_every=0, **rl_overrides)
  c.rl.grpo.kl_coef = 0.05
  c.optimizer.learning_rate = 3e-3
  return c
