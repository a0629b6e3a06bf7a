"""How an RL run's own rollouts fared over time, per domain and difficulty level.

The trainer logs, for every step's scored rollouts, `domain/<d>/difficulty/<k>/pass_rate`
and the number of rollouts behind it (`.../count`). Pooled over windows of steps
(weighted by count), they show whether the policy's samples got better where RL trained
on them, before any held-out evaluation: a level whose rollouts never pass gives GRPO no
gradient, and a flat line over a run says the updates did not move it. Any other
component the trainer logs per domain (`domain/<d>/<component>`, e.g. `process`, the
share of right steps) pools the same way, per domain (level "all").
"""

import re
from collections.abc import Mapping, Sequence

from rl_post.errors import ConfigError, MissingInputError, one_line
from rl_post.metrics.writers import read_metrics

_PASS_RE = re.compile(r"^domain/(?P<domain>[^/]+)/difficulty/(?P<level>-?\d+)/pass_rate$")


def _cell(key: str, component: str) -> tuple[str, int | None] | None:
  """(domain, level) of a metrics key holding `component` (level None: the whole domain)."""
  if component == "pass_rate":
    match = _PASS_RE.match(key)
    return (match["domain"], int(match["level"])) if match else None
  parts = key.split("/")
  if len(parts) == 3 and parts[0] == "domain" and parts[2] == component:
    return parts[1], None
  return None


def logged_components(records: Sequence[Mapping]) -> set[str]:
  """What `component` can be for these metrics: "pass_rate" when per-level pass rates are
  logged, and each per-domain key's last part (`domain/<d>/<component>`) but "count"."""
  names = set()
  for record in records:
    for key in record:
      if _PASS_RE.match(key):
        names.add("pass_rate")
      parts = key.split("/")
      if len(parts) == 3 and parts[0] == "domain" and parts[2] != "count":
        names.add(parts[2])
  return names


def windowed_pass_rates(records: Sequence[Mapping], window: int, component: str = "pass_rate"
                        ) -> dict[tuple[str, int | None], list[tuple[int, int, float | None, int]]]:
  """{(domain, level): [(first_step, last_step, pooled pass rate, rollouts), ...]}.

  Windows are `window` consecutive steps from the run's first logged step; a
  window where a level had no rollouts has rate None and 0 rollouts. Records
  without a `step` (or with a None rate or count) are skipped. With another
  `component` (e.g. "process"), its per-domain mean instead, level None.
  """
  if window < 1:
    raise ValueError(f"window must be >= 1 step, got {window}")
  steps = [int(r["step"]) for r in records if r.get("step") is not None]
  if not steps:
    return {}
  first, last = min(steps), max(steps)
  num_windows = (last - first) // window + 1
  sums: dict[tuple[str, int], list[list[float]]] = {}
  for record in records:
    if record.get("step") is None:
      continue
    w = (int(record["step"]) - first) // window
    for key, rate in record.items():
      name = _cell(key, component)
      if name is None:
        continue
      count = record.get(key[:-len(component)] + "count")
      if rate is None or count is None:
        continue
      cell = sums.setdefault(name, [[0.0, 0.0] for _ in range(num_windows)])
      cell[w][0] += float(rate) * float(count)
      cell[w][1] += float(count)
  return {cell: [(first + w * window, min(first + (w + 1) * window - 1, last),
                  passed / n if n else None, int(n)) for w, (passed, n) in enumerate(rows)]
          for cell, rows in sorted(sums.items())}


def trend_table_md(trend: Mapping[tuple[str, int | None], Sequence[tuple]], title: str = ""
                   ) -> str:
  """A Markdown table: one row per (domain, level), one column per window (in %)."""
  if not trend:
    return f"{title}\n\n(no such per-domain or per-level rates in these metrics)\n" if title else ""
  windows = next(iter(trend.values()))
  head = ["domain", "level"] + [f"steps {a}-{b}" for a, b, _, _ in windows] + ["rollouts"]
  lines = ([title, ""] if title else []) + ["| " + " | ".join(head) + " |",
                                            "|" + "---|" * len(head)]
  for (domain, level), rows in trend.items():
    cells = ["-" if rate is None else f"{100 * rate:.1f}" for _, _, rate, _ in rows]
    level = "all" if level is None else str(level)
    lines.append("| " + " | ".join([domain, level, *cells, str(sum(r[3] for r in rows))])
                 + " |")
  return "\n".join(lines) + "\n"


def read_run(workdir: str, field: str = "--runs") -> list[dict]:
  """`read_metrics(workdir)`, with a missing or garbled metrics.jsonl as a user error.

  Raises:
    MissingInputError: naming `field` and the run; for a malformed line, the
      message names the file and its line number.
  """
  try:
    return read_metrics(workdir)
  except FileNotFoundError as e:
    raise MissingInputError(field, workdir, f"{e} (an RL workdir holds one)") from e
  except (ValueError, OSError) as e:  # a malformed line (the message names file and line)
    detail = one_line(e)
    raise MissingInputError(field, workdir, f"metrics cannot be read: {detail}") from e


def trend_tables(runs: Sequence[str], window: int, component: str = "pass_rate") -> list[str]:
  """One `trend_table_md` per RL workdir in `runs`, for experiments/rollout_trend.py.

  Raises:
    ConfigError: no runs (`--runs`), `window` < 1 (`--window`), or a `component` other
      than pass_rate that the runs do not log (`--component`).
    MissingInputError: a run without a readable metrics.jsonl (`--runs`).
  """
  runs = [run for run in runs if run]
  if not runs:
    raise ConfigError("--runs", ",".join(runs), "names no RL workdir")
  if window < 1:
    raise ConfigError("--window", window, "must be >= 1 step")
  records = {run: read_run(run) for run in runs}
  logged = set().union(*map(logged_components, records.values()))
  if component != "pass_rate" and logged and component not in logged:
    raise ConfigError("--component", component, "is not logged per domain in these runs; "
                      f"they log: {', '.join(sorted(logged))}")
  what = "pass rate" if component == "pass_rate" else component
  return [trend_table_md(windowed_pass_rates(run_records, window, component),
                         title=f"Rollout {what} (%), {run}")
          for run, run_records in records.items()]
