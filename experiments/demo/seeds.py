"""Mean, spread and 95% interval of demo results over seeds.

One row per seed holds the before/after completion rates of that seed's
report (`rl_post.eval.report.write_report`'s summary.json); `aggregate`
reduces a field over the rows: mean, sample standard deviation (ddof=1),
min, max and the Student-t 95% interval of the mean (n - 1 degrees of
freedom), which is what "the figure varies by this much across seeds" means
for n >= 2.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats as scipy_stats

from experiments.demo import demo_tables

# (field, the summary.json eval or comparison it comes from)
RATE_FIELDS = ("before", "after", "before_sampled", "after_sampled")
DIFF_FIELDS = {"diff": "", "diff_sampled": "_sampled"}
# From summary.json's "demo" tables (experiments.demo.demo_tables), when present: the control
# arm, rates averaged over domains (greedy and sampled), RL - control paired over all
# problems, and the levels without demonstrations (a start trained on demonstrations).
DEMO_FIELDS = ("control", "control_sampled", "macro_before", "macro_after", "macro_control",
               "macro_diff", "macro_sampled_before", "macro_sampled_after",
               "macro_sampled_control", "macro_sampled_diff", "after_vs_control",
               "unseen_before", "unseen_after", "unseen_control", "unseen_after_vs_control",
               "rl_wall_s", "control_wall_s")
FIELDS = (*RATE_FIELDS, *DIFF_FIELDS)


def seed_row(seed: int, summary: Mapping[str, Any]) -> dict:
  """The row of one seed from its report summary (summary.json's dict).

  Returns:
    {"seed", <RATE_FIELDS>: completion rate, <DIFF_FIELDS>: paired change,
     "p_value", "p_value_sampled": exact McNemar p, "by_domain":
     {domain: {<RATE_FIELDS>: rate}}}.
  """
  evals, comparisons = summary["evals"], summary["comparisons"]
  missing = [f for f in RATE_FIELDS if f not in evals]
  missing += [f"comparisons[{s!r}]" for s in DIFF_FIELDS.values() if s not in comparisons]
  if missing:
    raise ValueError(f"seed {seed}: report summary lacks {missing}")
  row = {"seed": int(seed)}
  row.update({f: evals[f]["completion_rate"] for f in RATE_FIELDS})
  for field, suffix in DIFF_FIELDS.items():
    row[field] = comparisons[suffix]["diff"]
    row["p_value" + suffix] = comparisons[suffix]["p_value"]
  domains = sorted(set().union(*(evals[f].get("by_domain", {}) for f in RATE_FIELDS)))
  row["by_domain"] = {d: {f: evals[f]["by_domain"][d]["completion_rate"] for f in RATE_FIELDS
                          if d in evals[f].get("by_domain", {})} for d in domains}
  if "demo" in summary:
    row.update(demo_fields(summary))
  return row


def demo_fields(summary: Mapping[str, Any]) -> dict:
  """The DEMO_FIELDS of a summary with "demo" tables, and control per domain."""
  demo, evals = summary["demo"], summary["evals"]
  unseen = demo.get("unseen", {})
  out = {"control": evals["control"]["completion_rate"],
         "control_sampled": evals["control_sampled"]["completion_rate"],
         "macro_diff": demo["macro_diff"],
         "after_vs_control": (demo.get("all", {}).get("after_vs_control") or {}).get("diff"),
         "unseen_after_vs_control": (unseen.get("after_vs_control") or {}).get("diff"),
         "rl_wall_s": demo["wall_s"]["rl"], "control_wall_s": demo["wall_s"]["control"],
         "names": demo_tables.arm_names(demo.get("names"))}
  for arm in ("before", "after", "control"):
    out[f"macro_{arm}"] = demo["macro"][arm]["rate"]
    out[f"unseen_{arm}"] = unseen.get(arm)
    if "macro_sampled" in demo:
      out[f"macro_sampled_{arm}"] = demo["macro_sampled"][arm]["rate"]
  if "macro_sampled" in demo:
    out["macro_sampled_diff"] = out["macro_sampled_after"] - out["macro_sampled_before"]
  out["cells"] = demo["cells"]
  return out


def spread(values: Sequence[float], confidence: float = 0.95) -> dict:
  """n, mean, std (ddof=1), min, max and the t-interval of the mean.

  std and the interval are None for a single value (no spread to measure).
  """
  values = [float(v) for v in values]
  if not values or not all(math.isfinite(v) for v in values):
    raise ValueError(f"spread needs one or more finite values, got {values}")
  n, mean = len(values), statistics.fmean(values)
  out = {"n": n, "mean": mean, "std": None, "min": min(values), "max": max(values),
         "ci_low": None, "ci_high": None}
  if n >= 2:
    std = statistics.stdev(values)
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    out.update(std=std, ci_low=mean - half, ci_high=mean + half)
  return out


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict:
  """{field: spread} over the rows, and {domain: {field: spread}} per domain."""
  if not rows:
    raise ValueError("aggregate needs at least one seed row")
  seeds = [r["seed"] for r in rows]
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"seed rows repeat a seed: {seeds}")
  out = {f: spread([r[f] for r in rows]) for f in FIELDS}
  for f in DEMO_FIELDS:
    if all(r.get(f) is not None for r in rows):
      out[f] = spread([r[f] for r in rows])
  cells = [r["cells"] for r in rows if "cells" in r]
  if cells and len(cells) == len(rows):
    out["cells"] = _aggregate_cells(cells)
  domains = sorted({d for r in rows for d in r["by_domain"]})
  out["by_domain"] = {
      d: {f: spread([r["by_domain"][d][f] for r in rows]) for f in RATE_FIELDS
          if all(f in r["by_domain"].get(d, {}) for r in rows)}
      for d in domains}
  return out


def _aggregate_cells(cells_per_row: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict]:
  """Per (domain, level): each arm's spread over the seeds."""
  keyed = [{(c["domain"], c["level"]): c for c in cells} for cells in cells_per_row]
  out = []
  for key in sorted(set.intersection(*(set(k) for k in keyed))):
    first = keyed[0][key]
    out.append({"domain": key[0], "level": key[1], "demonstrations": first["demonstrations"],
                "n": [k[key]["n"] for k in keyed],
                **{arm: spread([k[key][arm] for k in keyed])
                   for arm in ("before", "after", "control")}})
  return out


def _pct(x: float | None, signed: bool = False) -> str:
  if x is None:
    return "-"
  return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _spread_cell(s: Mapping[str, Any], signed: bool) -> str:
  if s["std"] is None:
    return _pct(s["mean"], signed)
  return (f"{_pct(s['mean'], signed)} ± {100 * s['std']:.1f} "
          f"[{_pct(s['ci_low'], signed)}, {_pct(s['ci_high'], signed)}]")


def render_markdown(title: str, rows: Sequence[Mapping[str, Any]], agg: Mapping[str, Any],
                    command: str, machine: Mapping[str, Any]) -> str:
  """seeds.md: per-seed rows, then mean ± std [95% t-interval] per field."""
  head = ("| seed | greedy before | greedy after | greedy Δ pp | p | sampled before | "
          "sampled after | sampled Δ pp | p |")
  lines = [f"# {title}", "", f"Command: `{command}`", "",
           "Machine: " + ", ".join(f"{k}={v}" for k, v in machine.items()), "",
           "Completion rates in %; Δ is after - before on the same held-out problems, "
           "p the exact McNemar p-value of that seed.", "", head, "|---" * 9 + "|"]
  for r in rows:
    lines.append(f"| {r['seed']} | {_pct(r['before'])} | {_pct(r['after'])} | "
                 f"{_pct(r['diff'], True)} | {r['p_value']:.3g} | {_pct(r['before_sampled'])} | "
                 f"{_pct(r['after_sampled'])} | {_pct(r['diff_sampled'], True)} | "
                 f"{r['p_value_sampled']:.3g} |")
  lines += ["", f"Over {len(rows)} seeds: mean ± std [95% t-interval of the mean].", "",
            "| field | value |", "|---|---|"]
  lines += [f"| {f} | {_spread_cell(agg[f], f in DIFF_FIELDS)} |" for f in FIELDS]
  if agg["by_domain"]:
    lines += ["", "Per domain (mean ± std [95% t-interval]):", "",
              "| domain | " + " | ".join(RATE_FIELDS) + " |", "|---" * (len(RATE_FIELDS) + 1) + "|"]
    for d, fields in agg["by_domain"].items():
      cells = [_spread_cell(fields[f], False) if f in fields else "-" for f in RATE_FIELDS]
      lines.append(f"| {d} | " + " | ".join(cells) + " |")
  if "macro_after" in agg:
    lines += _demo_lines(rows, agg)
  return "\n".join(lines) + "\n"


def _demo_lines(rows: Sequence[Mapping[str, Any]], agg: Mapping[str, Any]) -> list[str]:
  """The control arm, the domain averages and, for a start trained on demonstrations,
  the levels without them."""
  names = rows[0].get("names") or demo_tables.arm_names()
  start, control = names["before"], names["control"]
  demos = any(r.get("unseen_before") is not None for r in rows)
  columns = [("macro_before", f"macro {start}", False), ("macro_after", "macro RL", False),
             ("macro_control", f"macro {control}", False), ("macro_diff", "macro Δ pp", True)]
  if any(r.get("macro_sampled_after") is not None for r in rows):
    columns += [("macro_sampled_before", "sampled macro start", False),
                ("macro_sampled_after", "sampled macro RL", False),
                ("macro_sampled_diff", "sampled macro Δ pp", True)]
  columns.append(("after_vs_control", "RL - control pp (all)", True))
  if demos:
    columns += [("unseen_before", "unseen start", False), ("unseen_after", "unseen RL", False),
                ("unseen_control", "unseen control", False),
                ("unseen_after_vs_control", "unseen RL - control pp", True)]
  note = ("macro: completion averaged over domains (greedy; sampled: one sample per problem "
          "at the RL temperature); RL - control: paired, on the same problems")
  note += "; unseen: levels without SFT demonstrations." if demos else "."
  lines = ["", f"## {start} vs RL vs {control}", "", note, "",
           "| seed | " + " | ".join(c[1] for c in columns) + " | RL s | control s |",
           "|---" * (len(columns) + 3) + "|"]
  for r in rows:
    lines.append(f"| {r['seed']} | " + " | ".join(_pct(r.get(f), signed) for f, _, signed
                                                  in columns)
                 + f" | {r['rl_wall_s']:.0f} | {r['control_wall_s']:.0f} |")
  lines += ["", "| field | mean ± std [95% t-interval] |", "|---|---|"]
  lines += [f"| {f} | {_spread_cell(agg[f], f.endswith(('diff', 'vs_control')))} |"
            for f in DEMO_FIELDS if f in agg and not f.endswith("wall_s")]
  if "cells" in agg:
    head = f"| domain | level |{' demos |' if demos else ''} {start} | after RL | {control} |"
    lines += ["", "Per domain and level (greedy, mean ± std over seeds):", "", head,
              "|---" * (6 if demos else 5) + "|"]
    for c in agg["cells"]:
      demo_cell = f" {'yes' if c['demonstrations'] else 'no'} |" if demos else ""
      lines.append(f"| {c['domain']} | {c['level']} |{demo_cell} "
                   + " | ".join(_spread_cell(c[a], False) for a in ("before", "after", "control"))
                   + " |")
  return lines
