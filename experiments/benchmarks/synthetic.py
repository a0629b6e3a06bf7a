"""The synthetic whole-step workload every side of grpo_step.py's comparison runs
(numpy only: imported by whole_step.py before jax starts, and by the tests)."""

import numpy as np

RESERVED_IDS = 4  # pad, unk, bos, eos: never in a prompt


def workload_spec(name: str, arch: dict, prompts: int, group: int, prompt_len: int,
                  response: int, beta: float, steps: int, learning_rate: float = 1e-5,
                  seed: int = 0) -> dict:
  """The workload every side runs: same architecture, ids, lengths, group and beta."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(RESERVED_IDS, arch["vocab_size"], (prompts, prompt_len)).tolist()
  return dict(name=name, arch=arch, prompts=prompts, group=group, prompt_len=prompt_len,
              response=response, beta=beta, steps=steps, learning_rate=learning_rate,
              seed=seed, prompt_ids=ids)


def even_fraction_N(response_ids_NxR: np.ndarray, mask_NxR: np.ndarray) -> np.ndarray:
  """The synthetic reward: fraction of even token ids among the response tokens."""
  even = ((response_ids_NxR % 2) == 0) & (mask_NxR > 0)
  return (even.sum(axis=1) / np.maximum(mask_NxR.sum(axis=1), 1)).astype(np.float32)
