"""Fault log and fault injection, to show that a run survives what it claims.

`FaultLog` appends every injected or handled fault to `<workdir>/faults.jsonl`
(one JSON object per line: kind, step, details) and reports cumulative counts
as `faults/<kind>` metrics. The file outlives crashes, so counts include
faults seen by earlier processes on the same workdir, and restarts made by
`launch/supervise.py` (`<workdir>/restarts.jsonl`) are counted as
`faults/restarts`.

`FaultInjector` reads the `faults` config section:
  nonfinite_loss_at_steps  train iterations (1-based, as in metrics.jsonl)
                           whose batch is poisoned so the loss is NaN; fires
                           every time the iteration runs (like bad data)
  kill_at_steps            SIGKILL this process after the iteration's
                           metrics row (and checkpoint, if due) is written
  sigterm_at_steps         send SIGTERM to this process at the same point
  corrupt_checkpoint_at_steps  corrupt the checkpoint just saved at the step
  corruption               how: "flip" (64 bytes of array data), "truncate"
                           (a data file), "manifest" (overwritten) or
                           "extra" (the extra/ item deleted)
Kills, SIGTERMs and corruptions are one-off: each fires once per workdir
(the log remembers it), so a restarted run goes past it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
from typing import Any

import numpy as np

from rl_post.config_sections import check

FAULTS_FILENAME = "faults.jsonl"
RESTARTS_FILENAME = "restarts.jsonl"
CORRUPTIONS = ("flip", "truncate", "manifest", "extra")
_ONE_OFF = {"kill_at_steps": "injected_kill", "sigterm_at_steps": "injected_sigterm",
            "corrupt_checkpoint_at_steps": "injected_checkpoint_corruption"}


@dataclasses.dataclass(frozen=True)
class FaultsConfig:
  nonfinite_loss_at_steps: tuple[int, ...] = ()
  kill_at_steps: tuple[int, ...] = ()
  sigterm_at_steps: tuple[int, ...] = ()
  corrupt_checkpoint_at_steps: tuple[int, ...] = ()
  corruption: str = "flip"

  def __post_init__(self):
    for f in ("nonfinite_loss_at_steps", *_ONE_OFF):
      steps = getattr(self, f)
      check(isinstance(steps, (tuple, list)) and all(
          isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in steps),
            f, "must be a tuple of ints >= 1", steps)
      object.__setattr__(self, f, tuple(steps))
    check(self.corruption in CORRUPTIONS, "corruption", f"must be one of {CORRUPTIONS}",
          self.corruption)

  @property
  def any(self) -> bool:
    return bool(self.nonfinite_loss_at_steps or any(getattr(self, f) for f in _ONE_OFF))


def _read_jsonl(path: str) -> list[dict]:
  """Records of a JSONL file; a line cut short by a crash is ignored."""
  if not os.path.exists(path):
    return []
  out = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except ValueError:
        continue
  return out


def _is_primary_process() -> bool:
  import sys
  jax = sys.modules.get("jax")  # JAX process 0, or True when JAX is not in use
  return jax is None or jax.process_index() == 0


class FaultLog:
  """Appends fault records to <workdir>/faults.jsonl; counts them by kind."""

  def __init__(self, workdir: str):
    self.workdir = workdir
    self.path = os.path.join(workdir, FAULTS_FILENAME)
    self.records = _read_jsonl(self.path)
    self.restarts = len(_read_jsonl(os.path.join(workdir, RESTARTS_FILENAME)))

  def record(self, kind: str, step: int, **info: Any) -> None:
    """Appends one record and fsyncs it (it may precede a SIGKILL)."""
    rec = {"kind": kind, "step": int(step), **info}
    self.records.append(rec)
    if not _is_primary_process():  # multi-host: every process records, process 0 writes
      return
    os.makedirs(self.workdir, exist_ok=True)
    with open(self.path, "a+b") as f:
      # a line cut short by a kill would swallow this record: start a new line
      torn = f.seek(0, os.SEEK_END) > 0 and f.seek(-1, os.SEEK_END) >= 0 and f.read(1) != b"\n"
      f.write((b"\n" if torn else b"") + json.dumps(rec, default=str).encode() + b"\n")
      f.flush()
      os.fsync(f.fileno())

  def count(self, kind: str) -> int:
    return sum(r["kind"] == kind for r in self.records)

  def fired(self, kind: str, step: int) -> bool:
    return any(r["kind"] == kind and r["step"] == step for r in self.records)

  def metrics(self) -> dict[str, float]:
    """Cumulative `faults/<kind>` counts (plus `faults/restarts`)."""
    kinds = sorted({r["kind"] for r in self.records})
    out = {f"faults/{k}": float(self.count(k)) for k in kinds}
    out["faults/restarts"] = float(self.restarts)
    return out


class FaultInjector:
  """Fires the configured faults at their steps, recording each in the log."""

  def __init__(self, config: FaultsConfig, log: FaultLog):
    self.config = config
    self.log = log

  def poison(self, step: int, batch: dict, key: str) -> dict:
    """`batch` with `batch[key]` all NaN if `step` is a nonfinite_loss step."""
    if step not in self.config.nonfinite_loss_at_steps:
      return batch
    self.log.record("injected_nonfinite_loss", step, field=key)
    return dict(batch, **{key: np.full_like(batch[key], np.nan, dtype=np.float32)})

  def after_checkpoint(self, step: int, checkpoint_dir: str, wait) -> None:
    """Corrupts the step just saved (after `wait()` commits it), once."""
    if not self._due("corrupt_checkpoint_at_steps", step):
      return
    wait()
    path = corrupt_step(os.path.join(checkpoint_dir, str(step)), self.config.corruption)
    self.log.record("injected_checkpoint_corruption", step,
                    corruption=self.config.corruption, path=path)

  def after_step(self, step: int) -> None:
    """Sends SIGTERM / SIGKILL to this process if due at `step` (once)."""
    if self._due("sigterm_at_steps", step):
      self.log.record("injected_sigterm", step)
      os.kill(os.getpid(), signal.SIGTERM)
    if self._due("kill_at_steps", step):
      self.log.record("injected_kill", step)
      os.kill(os.getpid(), signal.SIGKILL)

  def _due(self, field: str, step: int) -> bool:
    return step in getattr(self.config, field) and not self.log.fired(_ONE_OFF[field], step)


def _largest_file(root: str) -> str:
  files = [os.path.join(d, n) for d, _, names in os.walk(root) for n in names
           if n not in ("commit_success.txt", "_CHECKPOINT_METADATA")]
  if not files:
    raise FileNotFoundError(f"no files under {root}")
  return max(files, key=os.path.getsize)


def corrupt_step(step_dir: str, how: str) -> str:
  """Damages one saved checkpoint step in place; returns the path damaged.

  Args:
    step_dir: `<checkpoints>/<step>`.
    how: one of CORRUPTIONS.
  """
  state_dir = os.path.join(step_dir, "state")
  if how == "extra":
    path = os.path.join(step_dir, "extra")
    shutil.rmtree(path)
    return path
  if how == "manifest":
    path = os.path.join(state_dir, "manifest.ocdbt")
    with open(path, "wb") as f:
      f.write(b"\x00not a manifest\x00" * 8)
    return path
  path = _largest_file(os.path.join(state_dir, "ocdbt.process_0", "d")
                       if os.path.isdir(os.path.join(state_dir, "ocdbt.process_0")) else state_dir)
  size = os.path.getsize(path)
  if how == "truncate":
    os.truncate(path, size // 2)
    return path
  if how != "flip":
    raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {how!r}")
  with open(path, "r+b") as f:  # flip 64 bytes in the middle of the array data
    offset = max(0, size // 2 - 32)
    f.seek(offset)
    data = f.read(64)
    f.seek(offset)
    f.write(bytes(b ^ 0xFF for b in data))
  return path
