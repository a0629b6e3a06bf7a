"""PPO with a value head on the policy trunk, on arithmetic (the GRPO config otherwise).

  python experiments/train_rl.py --config=configs/ppo_arithmetic.py \
      --workdir=/tmp/rl_post/ppo --config.rl.init_from=/tmp/rl_post/sft/export
  # CPU smoke run from a fresh init:
  python experiments/train_rl.py --config=configs/ppo_arithmetic.py:tiny --workdir=/tmp/ppo_tiny
"""

from configs import grpo_arithmetic


def get_config(variant: str = ""):
  c = grpo_arithmetic.get_config(variant)
  c.rl.algorithm = "ppo"
  c.rl.ppo.update(kl_coef=0.02, critic="head", critic_learning_rate=1e-4)
  return c
