"""Turning tasks and demonstrations into padded int32 batches."""

from typing import Sequence

import numpy as np

from rl_post.data.tokenizer import Tokenizer
from rl_post.tasks.base import Task


def prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
  """BOS + prompt + newline: the model's response starts after it.

  A tokenizer with `chat_prompts` set (pretrained chat models) instead wraps
  the prompt as one user turn of its chat template, ending where the
  assistant's answer starts.
  """
  if getattr(tokenizer, "chat_prompts", False):
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": prompt}]))
  bos = [tokenizer.bos_id] if tokenizer.bos_id >= 0 else []
  return bos + tokenizer.encode(prompt + "\n")


def encode_prompts(tokenizer: Tokenizer, tasks: Sequence[Task], max_prompt_len: int):
  """Right-padded prompts_BxP and prompt_lens_B.

  Raises:
    ValueError: naming the task whose prompt exceeds max_prompt_len.
  """
  ids = [prompt_ids(tokenizer, t.prompt) for t in tasks]
  prompts_BxP = np.full((len(ids), max_prompt_len), tokenizer.pad_id, np.int32)
  for row, seq in enumerate(ids):
    if len(seq) > max_prompt_len:
      raise ValueError(f"task {tasks[row].task_id!r}: prompt has {len(seq)} tokens, "
                       f"more than max_prompt_len={max_prompt_len}")
    prompts_BxP[row, :len(seq)] = seq
  return prompts_BxP, np.array([len(s) for s in ids], np.int32)


def encode_demonstrations(tokenizer: Tokenizer, prompts: Sequence[str],
                          responses: Sequence[str], max_len: int):
  """SFT batch: tokens_BxT, loss mask_BxT on response + EOS, and #dropped.

  Examples longer than max_len are dropped (never truncated: a truncated
  demonstration teaches the model to stop mid-answer) and counted.
  """
  rows, masks = [], []
  for prompt, response in zip(prompts, responses, strict=True):
    p = prompt_ids(tokenizer, prompt)
    r = tokenizer.encode(response) + [tokenizer.eos_id]
    if len(p) + len(r) > max_len:
      continue
    rows.append(p + r)
    masks.append([0] * len(p) + [1] * len(r))
  tokens_BxT = np.full((len(rows), max_len), tokenizer.pad_id, np.int32)
  mask_BxT = np.zeros((len(rows), max_len), np.int32)
  for i, (seq, m) in enumerate(zip(rows, masks)):
    tokens_BxT[i, :len(seq)] = seq
    mask_BxT[i, :len(m)] = m
  return tokens_BxT, mask_BxT, len(prompts) - len(rows)


def decode_responses(tokenizer: Tokenizer, tokens_BxT: np.ndarray, mask_BxT: np.ndarray):
  """The response text of each row (tokens where mask is 1, EOS dropped)."""
  return [tokenizer.decode(row[m.astype(bool)].tolist()) for row, m in zip(tokens_BxT, mask_BxT)]
