"""Held-out evaluation of episodes: verified task success, tool use, turns and tokens.

  metrics = evaluate(rounds, params, model_config=mc, rng=key, batch_size=16)
  # or, from records of any policy (rl_post.envs.heldout.run_model / run_policy):
  metrics = heldout_metrics(records, "eval_sampled", ks=(1, 4))

`evaluate` runs the held-out set of an episodes run (`episodes.heldout_size`
tasks, apart from training: `rl_post.envs.heldout`) once greedily (keys
under `eval/`) and, when `episodes.heldout_ks` is set, max(ks) times per
task at the training temperature (`eval_sampled/`, with pass@k). For each
prefix, overall, per domain (`<prefix>/<domain>/...`) and per domain and
level (`<prefix>/<domain>/difficulty_<k>/...`):

  pass_rate            episodes the verifier alone scores 1 (no shaping); sampled: pass@1
  pass@<k>             sampled only: unbiased pass@k over each task's samples
  call_success         calls whose tool ran / calls, the episode-ending submit
                       not counted (the shaping term's count; 0 without calls)
  turns_per_episode    model turns
  tokens_per_episode   response tokens, model turns plus tool responses
  turns_per_solved     model turns of the solved episodes (absent when none is)

and overall `episodes`, `verify_errors` (verification runs that failed,
scored 0) and `context_exhausted` (episodes ended by the token budget), plus
`domain_mean/pass_rate`, the mean of the domains' pass rates.
"""

import collections
from typing import Sequence

import jax
import numpy as np

from rl_post.envs.heldout import EpisodeRecord
from rl_post.eval import stats


def _group_metrics(records: Sequence[EpisodeRecord], ks: Sequence[int]) -> dict:
  solved = np.array([r.solved for r in records], float)
  calls = sum(r.tool_calls for r in records)
  out = {"pass_rate": float(solved.mean()),
         "call_success": sum(r.call_successes for r in records) / calls if calls else 0.0,
         "turns_per_episode": float(np.mean([r.turns for r in records])),
         "tokens_per_episode": float(np.mean([r.tokens for r in records]))}
  solved_turns = [r.turns for r in records if r.solved]
  if solved_turns:
    out["turns_per_solved"] = float(np.mean(solved_turns))
  if ks:
    per_task = collections.defaultdict(list)
    for r in records:
      per_task[r.task].append(r.solved)
    n = np.array([len(v) for v in per_task.values()])
    c = np.array([sum(v) for v in per_task.values()])
    for k in ks:
      out[f"pass@{k}"] = float(np.mean(stats.pass_at_k(n, c, k)))
  return out


def heldout_metrics(records: Sequence[EpisodeRecord], prefix: str = "eval",
                    ks: Sequence[int] = ()) -> dict[str, float]:
  """Flat metrics of held-out episodes (module docstring); {} for no records.

  Raises:
    ValueError: a k above the samples some task has (pass@k needs k samples).
  """
  if not records:
    return {}
  samples = collections.Counter(r.task for r in records)
  if ks and max(ks) > min(samples.values()):
    raise ValueError(f"pass@{max(ks)} needs {max(ks)} samples of every task; some task has "
                     f"{min(samples.values())}")
  metrics = {f"{prefix}/{k}": v for k, v in _group_metrics(records, ks).items()}
  metrics[f"{prefix}/episodes"] = float(len(records))
  metrics[f"{prefix}/verify_errors"] = float(sum(r.verify_error for r in records))
  metrics[f"{prefix}/context_exhausted"] = float(sum(r.context_exhausted for r in records))
  domain_rates = []
  for domain in sorted({r.domain for r in records}):
    of_domain = [r for r in records if r.domain == domain]
    group = _group_metrics(of_domain, ks)
    domain_rates.append(group["pass_rate"])
    metrics.update({f"{prefix}/{domain}/{k}": v for k, v in group.items()})
    for level in sorted({r.difficulty for r in of_domain}):
      group = _group_metrics([r for r in of_domain if r.difficulty == level], ks)
      metrics.update({f"{prefix}/{domain}/difficulty_{level}/{k}": v for k, v in group.items()})
  metrics[f"{prefix}/domain_mean/pass_rate"] = float(np.mean(domain_rates))
  return metrics


def evaluate(rounds, params, *, model_config, rng, batch_size: int) -> dict[str, float]:
  """`eval/` (greedy) and `eval_sampled/` (max(heldout_ks) samples per task, pass@k)
  metrics of an `EpisodeRounds`' held-out set; {} when it has none."""
  if not rounds.heldout:
    return {}
  run = lambda greedy, key: rounds.heldout_records(
      params, model_config=model_config, rng=key, batch_size=batch_size, greedy=greedy)
  metrics = heldout_metrics(run(True, jax.random.fold_in(rng, 0)), "eval")
  ks = rounds.config.heldout_ks
  if ks:
    metrics.update(heldout_metrics(run(False, jax.random.fold_in(rng, 1)), "eval_sampled", ks))
  return metrics
