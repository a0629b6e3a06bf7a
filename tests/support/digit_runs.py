"""The tiny GRPO run the pipeline tests compare loops on (async rewards, overlapped updates).

4 steps of 4 prompts x 4 on the ContainsDigit domain (rl_fixtures), a
checkpoint every 2 steps, KL 0.05, no held-out set; `rl` overrides fields.
"""

from configs import grpo_arithmetic
from rl_fixtures import DIGIT_DOMAIN


def digit_config(tokenizer_path, **rl):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=0)
  c.rl.update(max_prompt_len=24, max_new_tokens=6, batch_size=4, num_generations=4,
              checkpoint_every=2, eval_every=0, num_steps=4)
  c.rl.grpo.kl_coef = 0.05
  c.rl.update(**rl)
  c.optimizer.learning_rate = 3e-3
  return c
