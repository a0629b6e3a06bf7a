"""Turning tasks and demonstrations into padded int32 batches."""

from typing import Sequence

import numpy as np

from rl_post.data.tokenizer import Tokenizer
from rl_post.errors import ConfigError
from rl_post.tasks.base import Task


def configure_prompts(tokenizer: Tokenizer, tokenizer_section) -> Tokenizer:
  """Applies the `tokenizer` config section's prompt settings to `tokenizer`.

  `tokenizer.system_prompt` (optional; "" or absent keeps the chat
  template's own default system turn) becomes the system turn of every chat
  prompt, e.g. to tell a chat model how to give its answers.

  Raises:
    ConfigError: a system prompt that is not a string, or one for a
      tokenizer without chat prompts (no chat template to put it in).
  """
  system_prompt = (tokenizer_section or {}).get("system_prompt") or ""
  if not isinstance(system_prompt, str):
    raise ConfigError("tokenizer.system_prompt", system_prompt, "must be a string")
  if system_prompt and not getattr(tokenizer, "chat_prompts", False):
    raise ConfigError("tokenizer.system_prompt", system_prompt,
                      "needs a tokenizer with a chat template (chat prompts); this one has none")
  tokenizer.system_prompt = system_prompt
  return tokenizer


def prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
  """BOS + prompt + newline: the model's response starts after it.

  A tokenizer with `chat_prompts` set (pretrained chat models) instead wraps
  the prompt as one user turn of its chat template, ending where the
  assistant's answer starts; after the configured system turn
  (`configure_prompts`), if any, else the template's default one.
  """
  if getattr(tokenizer, "chat_prompts", False):
    system = getattr(tokenizer, "system_prompt", "")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return tokenizer.encode(tokenizer.apply_chat_template(messages))
  bos = [tokenizer.bos_id] if tokenizer.bos_id >= 0 else []
  return bos + tokenizer.encode(prompt + "\n")


def encode_prompts(tokenizer: Tokenizer, tasks: Sequence[Task], max_prompt_len: int):
  """Right-padded prompts_BxP and prompt_lens_B.

  Raises:
    ConfigError: (a ValueError) on `rl.max_prompt_len`, naming the task whose
      prompt is longer.
  """
  ids = [prompt_ids(tokenizer, t.prompt) for t in tasks]
  prompts_BxP = np.full((len(ids), max_prompt_len), tokenizer.pad_id, np.int32)
  for row, seq in enumerate(ids):
    if len(seq) > max_prompt_len:
      raise ConfigError("rl.max_prompt_len", max_prompt_len,
                        f"is shorter than task {tasks[row].task_id!r}'s prompt "
                        f"({len(seq)} tokens)")
    prompts_BxP[row, :len(seq)] = seq
  return prompts_BxP, np.array([len(s) for s in ids], np.int32)


def demonstration_ids(tokenizer: Tokenizer, prompt: str, response: str):
  """(ids, loss mask) of one demonstration: prompt (mask 0), response + EOS (mask 1)."""
  p = prompt_ids(tokenizer, prompt)
  r = tokenizer.encode(response) + [tokenizer.eos_id]
  return p + r, [0] * len(p) + [1] * len(r)


Rendered = tuple[list[int], list[int]]  # (ids, loss mask) of one example


def pack_rendered(examples: Sequence[Rendered], max_len: int, pad_id: int,
                  row_multiple: int = 1) -> tuple[dict[str, np.ndarray], int]:
  """SFT batch with several examples per row (sequence packing).

  Examples ((ids, loss mask) pairs: a demonstration, `demonstration_ids`, or
  a multi-turn episode with a mask per token) go, longest first, into the
  first row of `max_len` tokens with room for them (first-fit decreasing; a
  new row when none has), and the rows are padded to a multiple of
  `row_multiple` (few distinct shapes, so few compilations). Each keeps its
  own positions (from 0) and a segment id (1, 2, ... within its row; 0 is
  padding), so attention never crosses examples and the loss is the one of
  the same examples padded one per row. Only examples longer than max_len
  are dropped (never truncated) and counted, as in `encode_rendered`.

  Returns:
    ({"tokens", "mask", "positions", "segments"}: int32 [rows, max_len]),
    number dropped.
  """
  if row_multiple < 1:
    raise ValueError(f"row_multiple must be >= 1, got {row_multiple}")
  kept = sorted((e for e in examples if len(e[0]) <= max_len), key=lambda e: -len(e[0]))
  dropped = len(examples) - len(kept)
  rows: list[list[Rendered]] = []
  used: list[int] = []
  for ids, mask in kept:
    row = next((r for r, n in enumerate(used) if n + len(ids) <= max_len), None)
    if row is None:
      rows.append([])
      used.append(0)
      row = len(rows) - 1
    rows[row].append((ids, mask))
    used[row] += len(ids)
  num_rows = max(1, -(-len(rows) // row_multiple)) * row_multiple
  batch = {k: np.zeros((num_rows, max_len), np.int32)
           for k in ("tokens", "mask", "positions", "segments")}
  batch["tokens"][:] = pad_id
  for r, row_examples in enumerate(rows):
    start = 0
    for seg, (ids, mask) in enumerate(row_examples, start=1):
      span = slice(start, start + len(ids))
      batch["tokens"][r, span] = ids
      batch["mask"][r, span] = mask
      batch["positions"][r, span] = np.arange(len(ids))
      batch["segments"][r, span] = seg
      start += len(ids)
  return batch, dropped


def pack_demonstrations(tokenizer: Tokenizer, prompts: Sequence[str], responses: Sequence[str],
                        max_len: int, row_multiple: int = 1) -> tuple[dict[str, np.ndarray], int]:
  """`pack_rendered` of the (prompt, response) demonstrations (`demonstration_ids`)."""
  return pack_rendered([demonstration_ids(tokenizer, p, r)
                        for p, r in zip(prompts, responses, strict=True)],
                       max_len, tokenizer.pad_id, row_multiple)


def encode_rendered(examples: Sequence[Rendered], max_len: int, pad_id: int):
  """SFT batch, one example per row: tokens_BxT, loss mask_BxT, and #dropped.

  Examples are (ids, loss mask) pairs; those longer than max_len are dropped
  (never truncated: a truncated demonstration teaches the model to stop
  mid-answer) and counted.
  """
  kept = [(ids, mask) for ids, mask in examples if len(ids) <= max_len]
  tokens_BxT = np.full((len(kept), max_len), pad_id, np.int32)
  mask_BxT = np.zeros((len(kept), max_len), np.int32)
  for i, (seq, m) in enumerate(kept):
    tokens_BxT[i, :len(seq)] = seq
    mask_BxT[i, :len(m)] = m
  return tokens_BxT, mask_BxT, len(examples) - len(kept)


def encode_demonstrations(tokenizer: Tokenizer, prompts: Sequence[str],
                          responses: Sequence[str], max_len: int):
  """`encode_rendered` of the (prompt, response) demonstrations: the loss mask covers
  response + EOS."""
  return encode_rendered([demonstration_ids(tokenizer, p, r)
                          for p, r in zip(prompts, responses, strict=True)],
                         max_len, tokenizer.pad_id)


def decode_responses(tokenizer: Tokenizer, tokens_BxT: np.ndarray, mask_BxT: np.ndarray):
  """The response text of each row (tokens where mask is 1, EOS dropped)."""
  return [tokenizer.decode(row[m.astype(bool)].tolist()) for row, m in zip(tokens_BxT, mask_BxT)]
