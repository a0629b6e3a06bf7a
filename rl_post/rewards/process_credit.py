"""Process (per-step) credit: verifier character spans -> response tokens.

A verifier scores steps of a completion as (char_start, char_end, score)
spans of its text (Verdict.step_scores). The trainer knows the tokens; a
token gets the score of the last listed span that overlaps the characters
it decodes to, and tokens no span touches are marked uncovered (the
trainer decides what they get, e.g. the outcome reward).
"""

from typing import Callable, Sequence

import numpy as np

from rl_post.tasks.base import StepScore, Verdict


def token_char_ends(decode: Callable[[Sequence[int]], str], token_ids: Sequence[int]) -> np.ndarray:
  """End offset in decode(token_ids) of each token's text: len(decode(prefix)).

  Exact for tokenizers whose prefix decodes are prefixes of the full text
  (SentencePiece, byte-level BPE on complete characters); costs T decodes.
  """
  ids = list(token_ids)
  return np.array([len(decode(ids[:t + 1])) for t in range(len(ids))], np.int64)


def spans_to_tokens_T(step_scores: Sequence[StepScore], char_ends_T: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
  """(score_T, covered_T) for one completion; token t covers characters
  [char_ends_T[t-1], char_ends_T[t]) (from 0 for t = 0)."""
  char_ends_T = np.asarray(char_ends_T, np.int64)
  if char_ends_T.ndim != 1 or np.any(np.diff(char_ends_T) < 0):
    raise ValueError(f"char_ends_T must be a non-decreasing 1-D array, got {char_ends_T!r}")
  starts_T = np.concatenate([[0], char_ends_T[:-1]])
  score_T = np.zeros(char_ends_T.shape, np.float32)
  covered_T = np.zeros(char_ends_T.shape, bool)
  for start, end, value in step_scores:
    hit_T = (starts_T < end) & (char_ends_T > start) & (char_ends_T > starts_T)
    score_T[hit_T] = value
    covered_T |= hit_T
  return score_T, covered_T


def token_rewards_NxT(verdicts: Sequence[Verdict], char_ends_NxT: np.ndarray,
                      mask_NxT: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(score_NxT, covered_NxT) for a batch; padding (mask 0) is never covered.

  char_ends_NxT[i, t] is the end offset of response token t of completion i
  (any non-decreasing values where mask_NxT is 0).
  """
  char_ends_NxT, mask_NxT = np.asarray(char_ends_NxT), np.asarray(mask_NxT, bool)
  if char_ends_NxT.shape != mask_NxT.shape or len(verdicts) != mask_NxT.shape[0]:
    raise ValueError(f"{len(verdicts)} verdicts, char_ends {char_ends_NxT.shape}, "
                     f"mask {mask_NxT.shape}: need N verdicts and two [N, T] arrays")
  score_NxT = np.zeros(mask_NxT.shape, np.float32)
  covered_NxT = np.zeros(mask_NxT.shape, bool)
  for i, verdict in enumerate(verdicts):
    score_NxT[i], covered_NxT[i] = spans_to_tokens_T(verdict.step_scores, char_ends_NxT[i])
  covered_NxT &= mask_NxT
  score_NxT *= covered_NxT
  return score_NxT, covered_NxT


def step_end_rewards_NxT(verdicts: Sequence[Verdict], totals_N: np.ndarray, tokens_NxT: np.ndarray,
                         mask_NxT: np.ndarray, decode: Callable[[Sequence[int]], str]
                         ) -> np.ndarray:
  """Per-token process rewards: totals_N[i] split over completion i's steps.

  Each step's share is proportional to its score and lands on the last
  response token that decodes part of the step's characters (response
  tokens are where mask_NxT is 1, in order, and decode to the verified
  text); a row with a total but no step scoring above 0 gets it on its
  last response token. So every row's rewards sum to totals_N[i]; rows
  whose total is 0 cost nothing (no decodes).
  """
  tokens_NxT, mask_NxT = np.asarray(tokens_NxT), np.asarray(mask_NxT, bool)
  totals_N = np.asarray(totals_N, np.float32)
  if (tokens_NxT.shape != mask_NxT.shape or len(verdicts) != mask_NxT.shape[0]
      or totals_N.shape != (len(verdicts),)):
    raise ValueError(f"{len(verdicts)} verdicts, totals {totals_N.shape}, tokens "
                     f"{tokens_NxT.shape}, mask {mask_NxT.shape}: need N of each and [N, T]")
  out_NxT = np.zeros(mask_NxT.shape, np.float32)
  for i in np.flatnonzero(totals_N):
    steps = [(end, score) for _, end, score in verdicts[i].step_scores if score > 0]
    positions = np.flatnonzero(mask_NxT[i])
    if not positions.size:
      raise ValueError(f"row {i} has a process reward but no response tokens")
    if not steps:
      out_NxT[i, positions[-1]] = totals_N[i]
      continue
    ends_T = token_char_ends(decode, tokens_NxT[i, positions].tolist())
    scale = totals_N[i] / sum(score for _, score in steps)
    for end, score in steps:
      t = min(int(np.searchsorted(ends_T, end, side="left")), positions.size - 1)
      out_NxT[i, positions[t]] += scale * score
  return out_NxT
