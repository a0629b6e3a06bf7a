r"""Our LoRA adapters loaded by Hugging Face `peft`: logits against our adapter forward.

  PYTHONPATH=. python experiments/benchmarks/peft_roundtrip.py     # needs peft, transformers, torch

Writes a tiny random Llama with `rl_post.models.hf.save` and random (trained-
looking, B != 0) adapters with `rl_post.models.peft.save_adapter`, loads both
with `transformers.AutoModelForCausalLM` + `peft.PeftModel.from_pretrained`,
and compares float32 logits with `rl_post.models.apply(..., lora=...)`; then
`merge_and_unload()` against our merged export. Prints one JSON line with the
max abs differences. A benchmark extra: the library never imports peft.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from rl_post import models  # noqa: E402
from rl_post.models import hf, peft  # noqa: E402
from rl_post.models import lora as lora_lib  # noqa: E402

CONFIG = models.ModelConfig(vocab_size=128, num_layers=2, embed_dim=64, num_heads=4,
                            num_kv_heads=2, head_dim=16, mlp_dim=128, tie_embeddings=False)
LORA = lora_lib.LoraConfig(rank=4, alpha=8.0)


def write(directory: str, seed: int = 0):
  """Base HF dir, PEFT adapter dir, tokens, our adapter logits and merged logits."""
  rng = np.random.default_rng(seed)
  params = jax.tree.map(lambda a: (0.1 * rng.standard_normal(a.shape)).astype(np.float32),
                        models.abstract_params(CONFIG))
  adapters = jax.tree.map(lambda a: (0.1 * rng.standard_normal(a.shape)).astype(np.float32),
                          lora_lib.abstract_adapters(CONFIG, LORA))
  base_dir = hf.save(os.path.join(directory, "base"), CONFIG, params)
  adapter_dir = peft.save_adapter(os.path.join(directory, "adapter"), CONFIG, adapters, LORA,
                                  base_model=base_dir)
  tokens = rng.integers(0, CONFIG.vocab_size, (2, 11)).astype(np.int32)
  ours = models.apply(CONFIG, params, jnp.asarray(tokens),
                      lora=lora_lib.for_model(adapters, LORA, CONFIG.num_layers))
  merged = lora_lib.merge(params, adapters, LORA)
  return base_dir, adapter_dir, tokens, np.asarray(ours), merged


def peft_logits(base_dir: str, adapter_dir: str, tokens: np.ndarray):
  """(PeftModel logits, merge_and_unload()'s state dict) in float32 numpy."""
  import torch
  import transformers
  from peft import PeftModel  # a benchmark extra: only this script imports it
  model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
  adapted = PeftModel.from_pretrained(model, adapter_dir)
  with torch.no_grad():
    logits = adapted(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
  merged = adapted.merge_and_unload().state_dict()
  return logits, {k: v.numpy() for k, v in merged.items()}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as directory:
    base_dir, adapter_dir, tokens, ours, merged = write(directory)
    theirs, their_merged = peft_logits(base_dir, adapter_dir, tokens)
    ours_hf = dict((name, make()) for name, _, make in hf.hf_tensors(CONFIG, merged))
  weight_diff = max(float(np.abs(their_merged[k] - v).max()) for k, v in ours_hf.items())
  result = dict(logits_max_abs_diff=float(np.abs(theirs - ours).max()),
                merged_weights_max_abs_diff=weight_diff, rank=LORA.rank, alpha=LORA.alpha)
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
