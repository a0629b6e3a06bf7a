"""Metric writers: one JSON line per step in `metrics.jsonl`, plus TensorBoard.

The JSONL file is the source of truth (reports and tests read it back with
`read_metrics`); TensorBoard event files under `tb/` are for live viewing and
are written with tensorboardX, so TensorFlow is not needed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

METRICS_FILENAME = "metrics.jsonl"
TB_DIRNAME = "tb"


def _to_float(key: str, value: Any) -> float:
  """Converts a Python/numpy/JAX scalar to float; names `key` on failure."""
  if isinstance(value, (str, bytes)):
    raise ValueError(
        f"metric {key!r} must be a number, got {type(value).__name__}")
  try:
    arr = np.asarray(value)
  except Exception as e:  # An object numpy cannot take.
    raise ValueError(f"metric {key!r} is not convertible to a number: {e}") from e
  if arr.ndim != 0:
    raise ValueError(
        f"metric {key!r} must be a scalar, got an array of shape {arr.shape}; "
        "reduce it (e.g. mean) before writing")
  if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
    raise ValueError(f"metric {key!r} must be numeric, got dtype {arr.dtype}")
  return float(arr)


def _check_step(step: Any) -> int:
  if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
    raise ValueError(f"step must be an int, got {step!r} ({type(step).__name__})")
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  return int(step)


def _parse_lines(path: str) -> tuple[list[dict], bool, bool]:
  """Parses metrics.jsonl.

  Returns:
    (records, truncated, clean): `truncated` if an unparsable last line (a
    write cut short by a crash) was dropped; `clean` if the file is exactly
    the records, one per newline-terminated line.
  Raises:
    ValueError: on a malformed line that is not the last one.
  """
  with open(path, "rb") as f:
    data = f.read()
  # A file ending in "\n" splits into [..., b""]; an interrupted write leaves
  # a non-empty last piece without a newline.
  lines = data.split(b"\n")
  records, truncated = [], False
  clean = data.endswith(b"\n") or not data
  for i, line in enumerate(lines):
    is_last = i == len(lines) - 1
    if not line.strip():
      clean = clean and is_last
      continue
    try:
      record = json.loads(line)
      if not isinstance(record, dict) or "step" not in record:
        raise ValueError("not a JSON object with a 'step' key")
    except ValueError as e:
      if is_last:
        truncated = True
        break
      raise ValueError(
          f"{path}: line {i + 1} is not a metrics record: {e}") from e
    records.append(record)
  return records, truncated, clean and not truncated


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
  """Reads `workdir/metrics.jsonl` back as a list of dicts, in file order.

  A truncated last line (the process died mid-write) is skipped with a
  warning; a malformed line elsewhere raises ValueError with its line number.
  Non-finite values were written as null and come back as None.
  """
  path = os.path.join(os.fspath(workdir), METRICS_FILENAME)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no metrics file at {path}")
  records, truncated, _ = _parse_lines(path)
  if truncated:
    warnings.warn(f"{path}: skipped a truncated last line (interrupted write)",
                  stacklevel=2)
  return records


def _is_primary_process() -> bool:
  """JAX process 0, or True when JAX is not in use (no import forced here)."""
  jax = sys.modules.get("jax")
  return jax is None or jax.process_index() == 0


class MetricWriter:
  """Writes scalar metrics per step to metrics.jsonl and TensorBoard.

  Usage:
    with MetricWriter(workdir, truncate_after_step=resumed_step) as w:
      w.write(step, {"reward/mean": r, "kl": kl})

  Attributes:
    nonfinite_counts: per metric key, how many NaN/inf values were written
      (as null in JSONL; skipped in TensorBoard).
  """

  def __init__(self, workdir: str | os.PathLike, *, tensorboard: bool = True,
               truncate_after_step: int | None = None, primary: bool | None = None):
    """Opens (appending to) `workdir/metrics.jsonl`.

    Args:
      workdir: run directory; created if missing.
      tensorboard: also write TensorBoard scalars to `workdir/tb/`.
      truncate_after_step: on resume from the checkpoint at this step, drop
        existing lines with a larger step, so replayed steps are not
        duplicated (TensorBoard gets the matching purge_step). None keeps
        every existing line.
      primary: whether this process writes files; default: JAX process 0
        only (in a multi-host run the others validate and discard).
    """
    self.workdir = os.fspath(workdir)
    if truncate_after_step is not None:
      truncate_after_step = _check_step(truncate_after_step)
    os.makedirs(self.workdir, exist_ok=True)
    self.path = os.path.join(self.workdir, METRICS_FILENAME)
    self.nonfinite_counts: dict[str, int] = {}
    self.primary = _is_primary_process() if primary is None else primary
    self._tb = None
    if not self.primary:
      self._file = open(os.devnull, "a", encoding="utf-8")
      return
    if os.path.exists(self.path):
      self._repair(truncate_after_step)
    self._file = open(self.path, "a", encoding="utf-8")
    if tensorboard:
      from tensorboardX import SummaryWriter  # Only needed when enabled.
      # purge_step makes TensorBoard hide the old run's events at replayed
      # steps (> truncate_after_step), mirroring the JSONL truncation.
      purge_step = None if truncate_after_step is None else truncate_after_step + 1
      self._tb = SummaryWriter(logdir=os.path.join(self.workdir, TB_DIRNAME),
                               purge_step=purge_step)

  def _repair(self, truncate_after_step: int | None) -> None:
    """Drops a truncated last line and, on resume, lines after the step."""
    records, truncated, clean = _parse_lines(self.path)
    if truncated:
      warnings.warn(f"{self.path}: dropping a truncated last line "
                    "(interrupted write)", stacklevel=3)
    keep = records
    if truncate_after_step is not None:
      keep = [r for r in records if r["step"] <= truncate_after_step]
    if clean and len(keep) == len(records):
      return
    tmp = self.path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
      for r in keep:
        f.write(json.dumps(r) + "\n")
    os.replace(tmp, self.path)

  def truncate_after(self, step: int) -> None:
    """Drops rows with a step > `step` (a rollback replays them)."""
    step = _check_step(step)
    if self._file is None:
      raise ValueError("MetricWriter is closed")
    if not self.primary:
      return
    self._file.close()
    self._repair(step)
    self._file = open(self.path, "a", encoding="utf-8")
    if self._tb is not None:
      from tensorboardX import SummaryWriter
      self._tb.close()
      self._tb = SummaryWriter(logdir=os.path.join(self.workdir, TB_DIRNAME),
                               purge_step=step + 1)

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    """Appends one record `{"step": step, **metrics}`.

    Args:
      step: training step, int >= 0.
      metrics: key -> scalar (float, numpy scalar, 0-d numpy or JAX array).
        Keys keep their `/` namespaces. NaN/inf are written as null.
    """
    if self._file is None:
      raise ValueError("MetricWriter is closed")
    step = _check_step(step)
    if not isinstance(metrics, Mapping):
      raise ValueError(f"metrics must be a mapping, got {type(metrics).__name__}")
    record: dict[str, float | int | None] = {"step": step}
    finite: dict[str, float] = {}
    for key, value in metrics.items():
      if not isinstance(key, str) or not key:
        raise ValueError(f"metric keys must be non-empty strings, got {key!r}")
      if key == "step":
        raise ValueError("metric key 'step' is reserved for the step number")
      x = _to_float(key, value)
      if math.isfinite(x):
        record[key] = x
        finite[key] = x
      else:
        record[key] = None
        self.nonfinite_counts[key] = self.nonfinite_counts.get(key, 0) + 1
    # One write + flush per record, so a crash loses at most this line.
    self._file.write(json.dumps(record) + "\n")
    self._file.flush()
    if self._tb is not None:
      for key, x in finite.items():
        self._tb.add_scalar(key, x, global_step=step)

  def flush(self) -> None:
    if self._file is not None:
      self._file.flush()
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    """Flushes and closes; further writes raise. Safe to call twice."""
    if self._file is not None:
      self._file.close()
      self._file = None
    if self._tb is not None:
      self._tb.close()
      self._tb = None

  def __enter__(self) -> MetricWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
