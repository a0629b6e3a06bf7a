"""Which logged metrics measure the machine rather than the run.

Tests that compare two runs' metrics.jsonl (resume, late metrics, update
width, chaos, several processes, the demo's seeds) drop the keys under these
prefixes: wall-clock, throughput, progress, compile counts and the host's
memory readings differ between runs that compute the same thing.
"""

MEASURED = ("time/", "throughput/", "perf/", "progress/", "compile/", "host/")


def computed_rows(rows: list[dict], extra: tuple = ()) -> list[dict]:
  """Each metrics row without the machine's measurements (and keys starting with `extra`)."""
  drop = MEASURED + tuple(extra)
  return [{k: v for k, v in row.items() if not k.startswith(drop)} for row in rows]
