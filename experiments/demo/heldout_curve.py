"""Held-out greedy completion against RL steps, over seeds: how fast does RL move it?

With `rl.eval_every` set, the RL trainer logs a held-out evaluation every that many
steps (`eval/<domain>/pass_rate`, `eval/<domain>/difficulty_<k>/pass_rate`, greedy).
For a demo workdir (`experiments/demo.py`, or one seed of `demo_seeds.py`) the report's
`summary.json` adds the SFT start (step 0) and the SFT control arm on the same held-out
problems, and its after-RL evaluation is the last step's point (the demo's trainer skips
its own, `rl.eval_at_end`). One row per point, each figure the mean ± std over the runs
given: the rate averaged over domains ("macro", each domain weighs the same, as in the
demo's tables) and each (domain, level) cell.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

from experiments.demo.rollout_trend import read_run
from experiments.demo.seeds import spread
from rl_post.errors import ConfigError, MissingInputError, reading

_DOMAIN_RE = re.compile(r"^eval/(?P<domain>[^/]+)/pass_rate$")
_LEVEL_RE = re.compile(r"^eval/(?P<domain>[^/]+)/difficulty_(?P<level>-?\d+)/pass_rate$")
START, CONTROL = "SFT start", "SFT control"
AFTER = "after RL"  # the demo's evaluation of the exported RL params: the last step's point


def rl_points(records: Sequence[Mapping]) -> dict[int, dict]:
  """{step: {"domains": {domain: rate}, "cells": {"domain/level": rate}}} of the
  records holding a held-out greedy evaluation (the trainer's `eval/...` keys)."""
  points = {}
  for record in records:
    if record.get("step") is None or record.get("eval/pass_rate") is None:
      continue
    domains, cells = {}, {}
    for key, rate in record.items():
      if (m := _DOMAIN_RE.match(key)) and rate is not None:
        domains[m["domain"]] = float(rate)
      elif (m := _LEVEL_RE.match(key)) and rate is not None:
        cells[f"{m['domain']}/{m['level']}"] = float(rate)
    points[int(record["step"])] = {"domains": domains, "cells": cells}
  return points


def demo_points(summary: Mapping) -> dict[str, dict]:
  """{START: point, CONTROL: point, AFTER: point} from a demo report's summary.json dict."""
  demo = summary.get("demo")
  if not demo:
    raise ValueError("summary.json has no demo tables (not a demo.py report)")
  points = {}
  for arm, label in (("before", START), ("control", CONTROL), ("after", AFTER)):
    points[label] = {"domains": dict(demo["macro"][arm]["by_domain"]),
                     "cells": {f"{c['domain']}/{c['level']}": c[arm] for c in demo["cells"]},
                     "unseen": [f"{c['domain']}/{c['level']}" for c in demo["cells"]
                                if c["demonstrations"] is False]}
  return points


def read_workdir(workdir: str) -> dict:
  """The points of one run: an RL workdir (metrics.jsonl), or a demo workdir (rl/ and
  report/summary.json; adds the SFT start and control).

  Raises:
    MissingInputError: (`--workdirs`) no metrics.jsonl, an unreadable summary.json, or
      no held-out evaluation in the metrics (rl.eval_every was 0 and the run ended early).
  """
  rl_dir = os.path.join(workdir, "rl")
  is_demo = os.path.isfile(os.path.join(rl_dir, "metrics.jsonl"))
  records = read_run(rl_dir if is_demo else workdir, "--workdirs")
  points: dict = {"rl": rl_points(records)}
  summary_path = os.path.join(workdir, "report", "summary.json")
  if is_demo and os.path.isfile(summary_path):
    with reading("--workdirs", summary_path):
      with open(summary_path, encoding="utf-8") as f:
        points.update(demo_points(json.load(f)))
    # The demo evaluates the exported params after the last step (its trainer does not).
    last = max((int(r["step"]) for r in records if r.get("step") is not None), default=None)
    after = points.pop(AFTER)
    if last is not None:
      points["rl"].setdefault(last, {"domains": after["domains"], "cells": after["cells"]})
  if not points["rl"]:
    raise MissingInputError("--workdirs", workdir, "its metrics hold no held-out evaluation "
                            "(eval/pass_rate): rerun with --config.rl.eval_every=N")
  return points


def _cell_order(cell: str) -> tuple[str, int]:
  domain, level = cell.rsplit("/", 1)
  return domain, int(level)


def _row(label: str, points: Sequence[Mapping]) -> dict:
  """Mean ± std over runs of one point: macro (domains' mean) and every cell."""
  macros = [sum(p["domains"].values()) / len(p["domains"]) for p in points]
  cells = sorted(set().union(*(p["cells"] for p in points)), key=_cell_order)
  row = {"point": label, "runs": len(points), "macro": spread(macros),
         "cells": {c: spread([p["cells"][c] for p in points if c in p["cells"]])
                   for c in cells}}
  unseen = sorted(set().union(*(p.get("unseen", ()) for p in points)), key=_cell_order)
  return dict(row, unseen=unseen) if unseen else row


def curve(runs: Sequence[Mapping]) -> list[dict]:
  """Rows over the runs (each `read_workdir`'s result): the SFT start when every run has
  one, each RL step every run evaluated, then the control when every run has one."""
  if not runs:
    raise ConfigError("--workdirs", "", "names no run")
  steps = sorted(set.intersection(*(set(r["rl"]) for r in runs)))
  if not steps:
    raise ConfigError("--workdirs", "", "the runs share no evaluated RL step (set the same "
                      "rl.eval_every)")
  rows = [_row(START, [r[START] for r in runs])] if all(START in r for r in runs) else []
  rows += [_row(f"RL step {s}", [r["rl"][s] for r in runs]) for s in steps]
  if all(CONTROL in r for r in runs):
    rows.append(_row(CONTROL, [r[CONTROL] for r in runs]))
  return rows


def _cell_text(s: Mapping) -> str:
  if s["std"] is None:
    return f"{100 * s['mean']:.1f}"
  return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}"


def curve_markdown(rows: Sequence[Mapping], title: str) -> str:
  """A Markdown table: one row per point, macro then each (domain, level) cell, in %;
  a level without SFT demonstrations is marked "(RL only)"."""
  cells = sorted(set().union(*(r["cells"] for r in rows)), key=_cell_order)
  unseen = set().union(*(r.get("unseen", ()) for r in rows))
  head = ["point", "runs", "macro", *(f"{c} (RL only)" if c in unseen else c for c in cells)]
  lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    values = [_cell_text(r["cells"][c]) if c in r["cells"] else "-" for c in cells]
    lines.append("| " + " | ".join([r["point"], str(r["runs"]), _cell_text(r["macro"]),
                                    *values]) + " |")
  return "\n".join(lines) + "\n"
