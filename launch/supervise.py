r"""Runs a training command and restarts it when it crashes.

  python launch/supervise.py --restart_on_failure=3 -- \
      python experiments/train_rl.py --config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/x
  launch/local.sh --restart_on_failure=3 experiments/train_rl.py ...   # the same

A run that exits non-zero (an exception, SIGKILL, OOM kill) is started again
with the same command after an exponential backoff (backoff_s, 2x, ...,
max_backoff_s), up to N times; the trainers resume from their newest good
checkpoint and drop metric rows after it. Not restarted: exit 0, exit 2
(configuration or input error: a rerun fails the same way), a run that
stopped with NonFiniteTrainingError (recorded in <workdir>/faults.jsonl), and
a run stopped by a SIGTERM/SIGINT sent to this supervisor (forwarded to the
run, which checkpoints and exits). Each restart is a line in
<workdir>/restarts.jsonl (on stderr when the workdir cannot be written; the
run is restarted all the same).

A bad flag or a command that cannot be started is one line,
`error: <field>=<value>: <problem>`, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

CONFIG_ERROR_EXIT = 2
RESTARTS_FILENAME = "restarts.jsonl"
FAULTS_FILENAME = "faults.jsonl"
GAVE_UP_KIND = "nonfinite_training_error"


def backoff_s(restart: int, base_s: float, max_s: float) -> float:
  """Delay before restart number `restart` (0-based): base * 2^restart, capped."""
  return min(base_s * 2.0 ** restart, max_s)


def exit_status(returncode: int) -> int:
  """A shell-style exit status: 128 + signal for a run killed by a signal."""
  return 128 - returncode if returncode < 0 else returncode


def describe(returncode: int) -> str:
  if returncode < 0:
    try:
      return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
      return f"killed by signal {-returncode}"
  return f"exit code {returncode}"


def workdir_of(command: list[str]) -> str | None:
  """The value of the command's --workdir flag (either spelling), if any."""
  for i, arg in enumerate(command):
    if arg.startswith("--workdir="):
      return arg.split("=", 1)[1]
    if arg == "--workdir" and i + 1 < len(command):
      return command[i + 1]
  return None


def gave_up_count(workdir: str | None) -> int:
  """How many NonFiniteTrainingError stops faults.jsonl records."""
  path = os.path.join(workdir, FAULTS_FILENAME) if workdir else ""
  if not path or not os.path.exists(path):
    return 0
  count = 0
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      for line in f:
        try:
          record = json.loads(line)
        except ValueError:
          continue
        count += isinstance(record, dict) and record.get("kind") == GAVE_UP_KIND
  except OSError:  # unreadable: no stop recorded that we can see
    return 0
  return count


def log_restart(workdir: str | None, record: dict) -> None:
  """Appends `record` to <workdir>/restarts.jsonl, or prints it to stderr when that
  cannot be written (the supervisor keeps supervising either way)."""
  if not workdir:
    return
  try:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, RESTARTS_FILENAME), "a+b") as f:
      # a line cut short by a kill would swallow this record: start a new line
      torn = f.seek(0, os.SEEK_END) > 0 and f.seek(-1, os.SEEK_END) >= 0 and f.read(1) != b"\n"
      f.write((b"\n" if torn else b"") + json.dumps(record).encode() + b"\n")
  except OSError as e:
    print(f"supervise: cannot write {os.path.join(workdir, RESTARTS_FILENAME)} "
          f"({e.strerror or e}); restart record: {json.dumps(record)}", file=sys.stderr,
          flush=True)


def user_error(field: str, value, problem: str) -> int:
  """Prints `error: <field>=<value>: <problem>` (the `rl_post.cli` form); returns 2."""
  print(f"error: {field}={value!r}: {problem}", file=sys.stderr, flush=True)
  return CONFIG_ERROR_EXIT


def supervise(command: list[str], max_restarts: int, *, base_backoff_s: float = 5.0,
              max_backoff_s: float = 300.0, workdir: str | None = None) -> int:
  """Runs `command` until it succeeds or may not be restarted; its exit status."""
  workdir = workdir or workdir_of(command)
  stop = {"signal": None}
  child = {"proc": None}

  def forward(signum, frame):
    del frame
    stop["signal"] = signum
    if child["proc"] is not None and child["proc"].poll() is None:
      child["proc"].send_signal(signum)

  previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    restarts = 0
    while True:
      gave_up_before = gave_up_count(workdir)
      started = time.time()
      try:
        child["proc"] = subprocess.Popen(command)
      except OSError as e:  # no such program, not executable: a restart fails the same way
        return user_error("command", command[0], f"cannot be started ({e.strerror or e})")
      returncode = child["proc"].wait()
      status = exit_status(returncode)
      if returncode == 0:
        return 0
      reason = None
      if stop["signal"] is not None:
        reason = f"stopped by signal {stop['signal']} sent to the supervisor"
      elif returncode == CONFIG_ERROR_EXIT:
        reason = "configuration or input error (exit 2): a restart would fail the same way"
      elif gave_up_count(workdir) > gave_up_before:
        reason = "the run stopped with NonFiniteTrainingError (see faults.jsonl)"
      elif restarts >= max_restarts:
        reason = f"giving up after {restarts} restarts (--restart_on_failure={max_restarts})"
      if reason:
        print(f"supervise: run ended with {describe(returncode)}; {reason}", file=sys.stderr)
        return status
      delay = backoff_s(restarts, base_backoff_s, max_backoff_s)
      restarts += 1
      log_restart(workdir, {"restart": restarts, "exit_code": returncode,
                            "reason": describe(returncode), "ran_s": round(time.time() - started, 3),
                            "backoff_s": delay, "time": time.time()})
      print(f"supervise: run ended with {describe(returncode)}; restart {restarts}/"
            f"{max_restarts} in {delay:g}s", file=sys.stderr, flush=True)
      time.sleep(delay)
      if stop["signal"] is not None:
        return status
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   usage="%(prog)s --restart_on_failure=N [options] -- COMMAND...")
  parser.add_argument("--restart_on_failure", type=int, required=True,
                      help="restart a crashed run up to N times")
  parser.add_argument("--backoff_s", type=float, default=5.0,
                      help="delay before the first restart; doubles each time")
  parser.add_argument("--max_backoff_s", type=float, default=300.0)
  parser.add_argument("--workdir", default=None,
                      help="where restarts.jsonl goes (default: the command's --workdir)")
  if "--" not in argv:
    parser.error("put the command after --")
  split = argv.index("--")
  args = parser.parse_args(argv[:split])
  command = argv[split + 1:]
  if not command:
    parser.error("no command after --")
  if args.restart_on_failure < 0:
    return user_error("--restart_on_failure", args.restart_on_failure, "must be >= 0")
  for name in ("backoff_s", "max_backoff_s"):
    value = getattr(args, name)
    if not math.isfinite(value) or value < 0:
      return user_error(f"--{name}", value, "must be a finite number of seconds >= 0")
  return supervise(command, args.restart_on_failure, base_backoff_s=args.backoff_s,
                   max_backoff_s=args.max_backoff_s, workdir=args.workdir)


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
