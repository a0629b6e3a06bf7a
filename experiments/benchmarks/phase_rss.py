r"""Host memory of an RL run at its phase boundaries: where the peak RSS comes from.

  PYTHONPATH=. python experiments/benchmarks/phase_rss.py \
      --config=configs/smollm2_135m_grpo.py --workdir=/tmp/phase_rss \
      --config.rl.num_steps=1 --config.tasks.heldout_size=0 \
      --config.rl.max_new_tokens=128 --config.rl.grad_accum=1 \
      --config.rl.lora.rank=16 --config.rl.lora.alpha=32.0

Runs `rl_post.rl.trainer.train` in this process (the flags of
`experiments/train_rl.py`) with its phases wrapped: after the tokenizer, the
run context, the pretrained load, the state's creation, the reference copy,
each rollout, the update's compile and the update. At each boundary it reads
/proc/self/status (VmRSS now, and the largest VmRSS a sampling thread saw
since the previous boundary), the bytes of `jax.live_arrays()` and glibc's
heap (`mallinfo2`: bytes in use, and free bytes the heap keeps). RSS above
the live arrays and the heap's in-use bytes is free heap kept, or the
runtime's own memory (libraries, compiled code, the compiler). Prints the table and, with --out, writes it as JSON.
"""

import ctypes
import json
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from rl_post import cli  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory.")
_OUT = flags.DEFINE_string("out", None, "Write the phase table here as JSON.")

GIB = 2**30


class _Mallinfo2(ctypes.Structure):
  _fields_ = [(name, ctypes.c_size_t) for name in (
      "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
      "fordblks", "keepcost")]


def _status() -> dict:
  out = {}
  with open("/proc/self/status") as f:
    for line in f:
      key, _, value = line.partition(":")
      if key in ("VmRSS", "VmHWM"):
        out[key] = int(value.split()[0]) * 1024
  return out


def _heap() -> dict:
  libc = ctypes.CDLL(None)
  if not hasattr(libc, "mallinfo2"):
    return {}
  libc.mallinfo2.restype = _Mallinfo2
  info = libc.mallinfo2()
  return dict(heap_used=info.uordblks + info.hblkhd, heap_free=info.fordblks)


def _live_bytes() -> tuple[int, int]:
  import jax
  arrays = jax.live_arrays()
  return len(arrays), sum(a.nbytes for a in arrays)


class Recorder:
  """Rows of (phase, RSS now, peak since the previous row, live arrays, heap).

  The peak between rows is the largest VmRSS a thread reads every `interval_s`
  (resetting the kernel's VmHWM through /proc/self/clear_refs would also reset
  the max RSS that `/usr/bin/time` and `getrusage` report)."""

  def __init__(self, interval_s: float = 0.05):
    self.rows = []
    self.start = time.perf_counter()
    self.peak = self.phase_peak = 0
    self._lock = threading.Lock()
    threading.Thread(target=self._sample, args=(interval_s,), daemon=True).start()

  def _sample(self, interval_s: float):
    while True:
      rss = _status()["VmRSS"]
      with self._lock:
        self.phase_peak = max(self.phase_peak, rss)
      time.sleep(interval_s)

  def mark(self, phase: str):
    status = _status()
    count, live = _live_bytes()
    with self._lock:
      phase_peak, self.phase_peak = max(self.phase_peak, status["VmRSS"]), 0
    self.peak = max(self.peak, phase_peak)
    row = dict(phase=phase, t_s=time.perf_counter() - self.start, rss=status["VmRSS"],
               phase_peak=phase_peak, hwm=status["VmHWM"], live_arrays=count,
               live_bytes=live, **_heap())
    self.rows.append(row)
    print(_line(row), flush=True)


def _line(r: dict) -> str:
  g = lambda k: f"{r.get(k, 0) / GIB:7.2f}"
  return (f"{r['phase']:<30} {r['t_s']:7.1f} {g('rss')} {g('phase_peak')} {g('hwm')} "
          f"{r['live_arrays']:6d} {g('live_bytes')} {g('heap_used')} {g('heap_free')}")


HEADER = (f"{'phase':<30} {'t s':>7} {'RSS':>7} {'peak':>7} {'VmHWM':>7} {'arrays':>6} "
          f"{'live':>7} {'heap':>7} {'free':>7}   (GiB; peak: since the row above)")


def _after(module, name: str, rec: Recorder, phase: str, before: str | None = None):
  """Wraps module.name so that rec marks `phase` after each call (and `before`
  ahead of it)."""
  fn = getattr(module, name)

  def wrapped(*args, **kwargs):
    if before:
      rec.mark(before)
    out = fn(*args, **kwargs)
    rec.mark(phase)
    return out

  setattr(module, name, wrapped)


def instrument(rec: Recorder):
  """Wraps the RL trainer's phases (module attributes the trainer looks up)."""
  from rl_post.rl import components, start_state, trainer
  from rl_post.training import run, state
  _after(run, "run_tokenizer", rec, "tokenizer")
  _after(components, "setup_run", rec, "run context (mesh, model)")
  _after(start_state, "pretrained_params", rec, "pretrained params placed")
  _after(state, "create_train_state", rec, "train state created")
  _after(start_state, "fresh_state", rec, "fresh state returned")
  _after(start_state, "reference_copy", rec, "reference copy")
  _after(trainer, "_setup_metrics", rec, "setup done")
  _after(trainer, "_collect", rec, "rollout + rewards")
  _after(trainer, "_release_before_update", rec, "update compiled, heap trimmed",
         before="batch on device")
  _after(trainer, "_await_update", rec, "update finished")
  _after(trainer, "_finish", rec, "metrics, checkpoint")


def main(argv):
  del argv
  rec = Recorder()
  print(HEADER, flush=True)
  rec.mark("start (jax imported)")
  instrument(rec)
  from rl_post.rl import trainer
  trainer.train(_CONFIG.value, _WORKDIR.value)
  rec.mark("end")
  print(f"peak RSS over the phases: {rec.peak / GIB:.2f} GiB")
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(dict(rows=rec.rows, peak_rss=rec.peak), f, indent=1)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  cli.run(main)
