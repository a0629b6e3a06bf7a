"""How an RL run's own rollouts fared over time, per domain and difficulty level.

The trainer logs, for every step's scored rollouts, `domain/<d>/difficulty/<k>/pass_rate`
and the number of rollouts behind it (`.../count`). Pooled over windows of steps
(weighted by count), they show whether the policy's samples got better where RL trained
on them, before any held-out evaluation: a level whose rollouts never pass gives GRPO no
gradient, and a flat line over a run says the updates did not move it.
"""

import re
from collections.abc import Mapping, Sequence

_PASS_RE = re.compile(r"^domain/(?P<domain>[^/]+)/difficulty/(?P<level>-?\d+)/pass_rate$")


def windowed_pass_rates(records: Sequence[Mapping], window: int
                        ) -> dict[tuple[str, int], list[tuple[int, int, float | None, int]]]:
  """{(domain, level): [(first_step, last_step, pooled pass rate, rollouts), ...]}.

  Windows are `window` consecutive steps from the run's first logged step; a
  window where a level had no rollouts has rate None and 0 rollouts. Records
  without a `step` (or with a None rate or count) are skipped.
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
      match = _PASS_RE.match(key)
      if not match:
        continue
      count = record.get(key[:-len("pass_rate")] + "count")
      if rate is None or count is None:
        continue
      cell = sums.setdefault((match["domain"], int(match["level"])),
                             [[0.0, 0.0] for _ in range(num_windows)])
      cell[w][0] += float(rate) * float(count)
      cell[w][1] += float(count)
  return {cell: [(first + w * window, min(first + (w + 1) * window - 1, last),
                  passed / n if n else None, int(n)) for w, (passed, n) in enumerate(rows)]
          for cell, rows in sorted(sums.items())}


def trend_table_md(trend: Mapping[tuple[str, int], Sequence[tuple]], title: str = "") -> str:
  """A Markdown table: one row per (domain, level), one column per window (pass rate in %)."""
  if not trend:
    return f"{title}\n\n(no per-level pass rates in these metrics)\n" if title else ""
  windows = next(iter(trend.values()))
  head = ["domain", "level"] + [f"steps {a}-{b}" for a, b, _, _ in windows] + ["rollouts"]
  lines = ([title, ""] if title else []) + ["| " + " | ".join(head) + " |",
                                            "|" + "---|" * len(head)]
  for (domain, level), rows in trend.items():
    cells = ["-" if rate is None else f"{100 * rate:.1f}" for _, _, rate, _ in rows]
    lines.append("| " + " | ".join([domain, str(level), *cells, str(sum(r[3] for r in rows))])
                 + " |")
  return "\n".join(lines) + "\n"
