"""The demo's comparison tables: SFT start vs RL vs the SFT control arm.

Inputs are per-problem evals of the same held-out problems (the "correct",
"domain" and "difficulty" arrays of `rl_post.eval.completion.evaluate`)
under three arms: "before" (the SFT model RL starts from), "after" (after
RL) and "control" (more SFT for about the wall-clock of RL). Outputs:

- `macro`: completion averaged over domains (each domain counts once,
  whatever its share of the held-out set) with a 95% interval;
- `cells`: per (domain, level) completion of each arm, and whether the
  level had demonstrations;
- `all`: every problem, each arm's rate and the paired RL - control and
  RL - start changes;
- `unseen` / `seen`: the same for the problems at levels without / with
  demonstrations (not for a start that saw none: a pretrained model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rl_post.eval import stats

ARMS = ("before", "after", "control")
_LABELS = {"before": "SFT (RL start)", "after": "after RL", "control": "SFT control"}
_NAMES = {"before": "SFT start", "after": "after RL", "control": "SFT control"}


def arm_names(names: Mapping[str, str] | None = None) -> dict:
  """{arm: short name}: the from-scratch demo's, with `names` replacing some."""
  return dict(_NAMES, **(names or {}))


def _arrays(evals: Mapping[str, Mapping[str, Any]]):
  """(correct {arm: bool [N]}, domain [N], difficulty [N]); checks the arms agree."""
  missing = [a for a in ARMS if a not in evals]
  if missing:
    raise ValueError(f"demo tables need evals {list(ARMS)}; missing {missing}")
  domain_N = np.asarray(evals["before"]["domain"])
  level_N = np.asarray(evals["before"]["difficulty"])
  correct = {}
  for arm in ARMS:
    ev = evals[arm]
    correct[arm] = np.asarray(ev["correct"], bool)
    if (correct[arm].shape != domain_N.shape
        or not np.array_equal(np.asarray(ev["domain"]), domain_N)
        or not np.array_equal(np.asarray(ev["difficulty"]), level_N)):
      raise ValueError(f"eval {arm!r} must list the same problems in the same order as "
                       "'before'")
  if domain_N.size < 2:
    raise ValueError(f"demo tables need at least 2 held-out problems, got {domain_N.size}")
  return correct, domain_N, level_N


def macro_rate(correct_N: np.ndarray, domain_N: np.ndarray, z: float = 1.96) -> dict:
  """Completion averaged over domains, with a normal 95% interval.

  The variance adds each domain's binomial variance, p(1-p)/n with p
  shrunk as (k+1)/(n+2) so a domain at 0% or 100% still has spread.
  """
  rates, var = [], 0.0
  domains = sorted(set(domain_N.tolist()))
  for d in domains:
    c = correct_N[domain_N == d]
    rates.append(float(c.mean()))
    p = (c.sum() + 1) / (c.size + 2)
    var += p * (1 - p) / c.size
  mean = float(np.mean(rates))
  half = z * math.sqrt(var) / len(domains)
  return {"rate": mean, "ci_low": max(0.0, mean - half), "ci_high": min(1.0, mean + half),
          "by_domain": dict(zip(domains, rates))}


def _arm_rates(correct, select_N) -> dict:
  return {arm: float(correct[arm][select_N].mean()) for arm in ARMS}


def _paired(correct, select_N, first: str, second: str) -> dict | None:
  if select_N.sum() < 2:
    return None
  return stats.paired_difference_ci(correct[first][select_N], correct[second][select_N])


def demo_tables(evals: Mapping[str, Mapping[str, Any]],
                demo_levels: Mapping[str, Sequence[int]]) -> dict:
  """The tables (module docstring) for greedy evals of the three arms.

  Args:
    evals: {"before", "after", "control"} -> per-problem eval.
    demo_levels: {domain: levels that had demonstrations}; a domain not
      listed had demonstrations at every level. None: no arm was trained on
      demonstrations (a pretrained start): no seen/unseen split, and the
      cells' "demonstrations" is None.
  """
  correct, domain_N, level_N = _arrays(evals)
  has_demo_N = None
  if demo_levels is not None:
    has_demo_N = np.array([level in tuple(demo_levels.get(d, (level,)))
                           for d, level in zip(domain_N.tolist(), level_N.tolist())])
  cells = []
  for d in sorted(set(domain_N.tolist())):
    for level in sorted(set(level_N[domain_N == d].tolist())):
      sel = (domain_N == d) & (level_N == level)
      demonstrations = None if has_demo_N is None else bool(has_demo_N[sel][0])
      cells.append({"domain": d, "level": int(level), "demonstrations": demonstrations,
                    "n": int(sel.sum()), **_arm_rates(correct, sel)})
  out = {"macro": {arm: macro_rate(correct[arm], domain_N) for arm in ARMS},
         "cells": cells}
  out["macro_diff"] = out["macro"]["after"]["rate"] - out["macro"]["before"]["rate"]
  subsets = [("all", np.ones_like(domain_N, bool))]
  if has_demo_N is not None:
    subsets += [("unseen", ~has_demo_N), ("seen", has_demo_N)]
  for name, sel in subsets:
    out[name] = {"n": int(sel.sum()),
                 **(_arm_rates(correct, sel) if sel.any() else {}),
                 "after_vs_control": _paired(correct, sel, "control", "after"),
                 "after_vs_before": _paired(correct, sel, "before", "after")}
  return out


def _pct(x: float | None) -> str:
  return "-" if x is None else f"{100 * x:.1f}"


def _pp(c: Mapping[str, float] | None) -> str:
  if c is None:
    return "-"
  return (f"{100 * c['diff']:+.1f} pp [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}], "
          f"p = {c['p_value']:.3g}")


def render_markdown(tables: Mapping[str, Any], wall_s: Mapping[str, float],
                    names: Mapping[str, str] | None = None) -> str:
  """The tables as Markdown (appended to the demo's summary.md); `names` names the
  arms (default: the from-scratch demo's SFT start and SFT control)."""
  labels = dict(_LABELS) if names is None else dict(_NAMES, **names)
  names = arm_names(names)
  start, control = names["before"], names["control"]
  macro = tables["macro"]
  lines = [f"## {start} vs RL vs {control} (greedy)", "",
           f"Wall-clock of the arms after the {start}: RL "
           f"{wall_s.get('rl', float('nan')):.0f} s, {control} "
           f"{wall_s.get('control', float('nan')):.0f} s.", "",
           "Averaged over domains (each domain weighs the same; normal 95% interval):", "",
           "| arm | completion % | 95% interval |", "|---|---|---|"]
  for arm in ARMS:
    m = macro[arm]
    lines.append(f"| {labels[arm]} | {_pct(m['rate'])} | "
                 f"[{_pct(m['ci_low'])}, {_pct(m['ci_high'])}] |")
  if "macro_strict" in tables:  # answer formats followed strictly, apart from the answers
    lines += ["", "Format-strict, averaged over domains: " + ", ".join(
        f"{labels[arm]} {_pct(tables['macro_strict'][arm]['rate'])}" for arm in ARMS) + "."]
  demos = "unseen" in tables  # the start was trained on demonstrations of some levels
  if "macro_sampled" in tables:  # one sample per problem at the RL temperature
    lines += ["", "Sampled (pass@1), averaged over domains: " + ", ".join(
        f"{labels[arm]} {_pct(tables['macro_sampled'][arm]['rate'])}" for arm in ARMS) + "."]
  lines += ["", f"RL - {start}, averaged over domains: {100 * tables['macro_diff']:+.1f} pp.",
            "", "Per domain and level (completion %" + ("; demos: the level had SFT "
                                                          "demonstrations" if demos else "")
            + "):", "",
            f"| domain | level |{' demos |' if demos else ''} n | {start} | after RL | "
            f"{control} |", "|---" * (7 if demos else 6) + "|"]
  for c in tables["cells"]:
    demo_cell = f" {'yes' if c['demonstrations'] else 'no'} |" if demos else ""
    lines.append(f"| {c['domain']} | {c['level']} |{demo_cell} {c['n']} | {_pct(c['before'])} | "
                 f"{_pct(c['after'])} | {_pct(c['control'])} |")
  subsets = ((("unseen", "levels without demonstrations"), ("seen", "levels with demonstrations"))
             if demos else (("all", "all held-out problems"),))
  for name, label in subsets:
    t = tables[name]
    if not t["n"]:
      continue
    lines += ["", f"**{label}** (n={t['n']}): {start} {_pct(t['before'])}%, after RL "
              f"{_pct(t['after'])}%, {control} {_pct(t['control'])}%; RL - control "
              f"{_pp(t['after_vs_control'])}; RL - start {_pp(t['after_vs_before'])}."]
  return "\n".join(lines) + "\n"
