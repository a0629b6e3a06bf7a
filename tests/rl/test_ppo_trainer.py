"""PPO through the trainer: the critic and its optimizer state are checkpointed and resume exactly."""

import jax
import numpy as np

from configs import grpo_arithmetic
from rl_fixtures import DIGIT_DOMAIN
from rl_post.metrics.writers import read_metrics
from rl_post.rl import trainer


def _config(tokenizer_path, num_steps):
  c = grpo_arithmetic.get_config("tiny")
  c.tokenizer.path = tokenizer_path
  c.tasks.update(domains=(DIGIT_DOMAIN,), difficulties=(1,), domain_options={}, heldout_size=0)
  c.rl.update(algorithm="ppo", num_steps=num_steps, max_prompt_len=24, max_new_tokens=4,
              batch_size=2, num_generations=2, checkpoint_every=1, eval_every=0, grad_accum=2)
  c.rl.ppo.update(kl_coef=0.05)
  c.rewards.num_workers = 0
  return c


def test_ppo_resume_restores_critic_exactly(tokenizer_path, tmp_path):
  straight = trainer.train(_config(tokenizer_path, 2), str(tmp_path / "straight"))
  trainer.train(_config(tokenizer_path, 1), str(tmp_path / "resumed"))
  resumed = trainer.train(_config(tokenizer_path, 2), str(tmp_path / "resumed"))
  a, b = read_metrics(str(tmp_path / "straight")), read_metrics(str(tmp_path / "resumed"))
  assert [m["step"] for m in b] == [1, 2]
  for key in ("loss", "value_loss", "kl", "critic_grad_norm"):
    np.testing.assert_allclose([m[key] for m in b], [m[key] for m in a], rtol=1e-6, err_msg=key)
  for part in ("params", "critic", "critic_opt_state"):
    same = jax.tree.map(lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)),
                        getattr(straight["state"], part), getattr(resumed["state"], part))
    assert all(jax.tree.leaves(same)), part
  assert float(np.abs(straight["state"].critic["head"]["w"]).sum()) > 0  # the critic trained
