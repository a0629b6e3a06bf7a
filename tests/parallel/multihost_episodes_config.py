"""GRPO over tool-use episodes for tests/parallel/test_multihost_episodes.py.

configs/grpo_episodes.py:tiny (2 tasks x 4 episodes of at most 3 turns) for 2
steps over `data_questions` and `fs_chores`, on an fsdp=2 mesh (2 devices: 2
processes x 1, or 1 x 2, so the params are split over the processes), one
sandbox worker per process, and a held-out set of 2 tasks evaluated greedily
after the last step.
"""

from configs import grpo_episodes


def get_config():
  c = grpo_episodes.get_config("tiny")
  c.mesh = dict(data=1, fsdp=2, tensor=1, context=1)
  c.episodes.update(domains=("data_questions", "fs_chores"), heldout_size=2, heldout_ks=())
  c.episodes.sandbox.num_workers = 1
  c.rl.update(num_steps=2, checkpoint_every=1, eval_every=0)
  c.optimizer.total_steps = 2
  return c
