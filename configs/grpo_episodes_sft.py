"""Cold start of the tiny model of configs/grpo_episodes.py: SFT on the oracles' solved episodes.

  python experiments/build_episode_sft.py --config=configs/grpo_episodes_sft.py \
      --out=/tmp/rl_post/cold/episodes.jsonl
  python experiments/train_sft.py --config=configs/grpo_episodes_sft.py \
      --config.sft.dataset=/tmp/rl_post/cold/episodes.jsonl --workdir=/tmp/rl_post/cold/sft
  # RL from it, with the budgets the cold start was built for:
  python experiments/train_rl.py --config=configs/grpo_episodes.py --workdir=/tmp/rl_post/cold/rl \
      --config.rl.init_from=/tmp/rl_post/cold/sft/export \
      --config.episodes.turn_tokens=256 --config.rl.max_new_tokens=1024
  # CPU smoke run (data_questions level 1, 2 SFT steps):
  python experiments/build_episode_sft.py --config=configs/grpo_episodes_sft.py:tiny \
      --out=/tmp/cold_tiny/episodes.jsonl
  python experiments/train_sft.py --config=configs/grpo_episodes_sft.py:tiny \
      --config.sft.dataset=/tmp/cold_tiny/episodes.jsonl --workdir=/tmp/cold_tiny/sft

The model, the call-vocabulary tokenizer and the `episodes` section are
those of configs/grpo_episodes.py (same variant), so the examples are
rendered as its RL episodes are (rl_post/sft/episodes.py). That tokenizer
spells the oracle's calls one character a token, so oracle turns and
episodes are several times that config's budgets: here and in the RL run
from this cold start they are `TURN_TOKENS` a turn and `EPISODE_TOKENS` an
episode, and episodes that still do not fit (repo_repair's rewrite of the
module, mostly) are dropped and counted (`<out>.stats.json`). The cold
start sees level 1 of every domain.
"""

from configs import grpo_episodes

TURN_TOKENS = 256      # episodes.turn_tokens of the RL run from this cold start
EPISODE_TOKENS = 1024  # its rl.max_new_tokens


def get_config(variant: str = ""):
  c = grpo_episodes.get_config(variant)  # the RL run: model, tokenizer, episodes, rl budgets
  c.episodes.turn_tokens = TURN_TOKENS
  c.rl.max_new_tokens = EPISODE_TOKENS
  c.cold_start = dict(domains=(), difficulties=(1,), tasks_per_level=64,
                      max_prompt_len=c.rl.max_prompt_len, max_new_tokens=c.rl.max_new_tokens,
                      batch_size=32)
  c.sft = dict(num_steps=300, batch_size=16, max_len=c.rl.max_prompt_len + c.rl.max_new_tokens,
               checkpoint_every=100, packing=True, pack_row_multiple=4, dataset="")
  c.optimizer = dict(learning_rate=3e-3, schedule="cosine", warmup_steps=20, total_steps=300,
                     weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    c.cold_start.update(domains=("data_questions",), tasks_per_level=4)
    c.sft.update(num_steps=2, batch_size=2, checkpoint_every=1, packing=False)
    c.optimizer.update(total_steps=2, warmup_steps=0)
  return c
