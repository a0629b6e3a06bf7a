"""launch/supervise.py and `launch/local.sh --restart_on_failure`: restarts."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from launch import supervise

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Fails in the ways listed in argv[2:] (one per run, counted in a file), then succeeds.
_FLAKY = r"""
import os, signal, sys
workdir, plan = sys.argv[1], [a for a in sys.argv[2:] if not a.startswith("--")]
path = os.path.join(workdir, "runs")
runs = int(open(path).read()) if os.path.exists(path) else 0
open(path, "w").write(str(runs + 1))
action = plan[runs] if runs < len(plan) else "ok"
if action == "kill":
  os.kill(os.getpid(), signal.SIGKILL)
if action == "gave_up":
  with open(os.path.join(workdir, "faults.jsonl"), "a") as f:
    f.write('{"kind": "nonfinite_training_error", "step": 3}\n')
  sys.exit(1)
sys.exit(0 if action == "ok" else int(action))
"""


def _run(tmp_path, restarts, *plan):
  command = [sys.executable, "-c", _FLAKY, str(tmp_path), *plan, f"--workdir={tmp_path}"]
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "supervise.py"),
                         f"--restart_on_failure={restarts}", "--backoff_s=0.01", "--",
                         *command], capture_output=True, text=True, timeout=60)
  runs = int((tmp_path / "runs").read_text())
  log = tmp_path / "restarts.jsonl"
  records = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
  return proc, runs, records


def test_crashes_are_restarted_with_backoff_until_success(tmp_path):
  proc, runs, records = _run(tmp_path, 3, "1", "kill")
  assert proc.returncode == 0, proc.stderr
  assert runs == 3
  assert [r["exit_code"] for r in records] == [1, -signal.SIGKILL]
  assert [r["backoff_s"] for r in records] == [0.01, 0.02]
  assert records[1]["reason"] == "killed by SIGKILL"
  assert "restart 2/3" in proc.stderr


def test_gives_up_after_n_restarts_with_the_runs_exit_status(tmp_path):
  proc, runs, records = _run(tmp_path, 2, "3", "3", "3", "3")
  assert proc.returncode == 3 and runs == 3 and len(records) == 2
  assert "giving up after 2 restarts" in proc.stderr
  (tmp_path / "k").mkdir()
  proc, runs, records = _run(tmp_path / "k", 0, "kill")
  assert proc.returncode == 128 + signal.SIGKILL and runs == 1 and records == []


@pytest.mark.parametrize("plan, reason", [("2", "configuration or input error"),
                                          ("gave_up", "NonFiniteTrainingError")])
def test_config_errors_and_nonfinite_stops_are_not_restarted(tmp_path, plan, reason):
  proc, runs, records = _run(tmp_path, 5, plan)
  assert proc.returncode in (1, 2) and runs == 1 and records == []
  assert reason in proc.stderr


def test_sigterm_is_forwarded_and_not_restarted(tmp_path):
  child = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
           "open(sys.argv[1], 'w').write('up')\n"
           "time.sleep(60)\n"
           "sys.exit(1)\n")
  ready = tmp_path / "ready"
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "launch", "supervise.py"),
                           "--restart_on_failure=3", "--backoff_s=0.01", f"--workdir={tmp_path}",
                           "--", sys.executable, "-c", child, str(ready)])
  deadline = time.time() + 30
  while not ready.exists() and time.time() < deadline:
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  assert proc.wait(timeout=30) == 0
  assert not (tmp_path / "restarts.jsonl").exists()


def test_local_sh_passes_restart_on_failure_to_the_supervisor(tmp_path):
  env = dict(os.environ, PYTHON=sys.executable)
  proc = subprocess.run(["bash", os.path.join(ROOT, "launch", "local.sh"),
                         "--restart_on_failure=1", "-c", _FLAKY, str(tmp_path), "kill",
                         f"--workdir={tmp_path}"], capture_output=True, text=True, env=env,
                        timeout=120)
  # local.sh uses the default 5 s backoff: one restart, then success
  assert proc.returncode == 0, proc.stderr
  records = [json.loads(x) for x in (tmp_path / "restarts.jsonl").read_text().splitlines()]
  assert [r["exit_code"] for r in records] == [-signal.SIGKILL]


def test_helpers():
  assert [supervise.backoff_s(i, 5, 30) for i in range(4)] == [5, 10, 20, 30]
  assert supervise.workdir_of(["x", "--workdir", "/a"]) == "/a"
  assert supervise.workdir_of(["x", "--workdir=/b"]) == "/b"
  assert supervise.workdir_of(["x"]) is None
  assert supervise.exit_status(-9) == 137 and supervise.exit_status(3) == 3
  with pytest.raises(SystemExit):
    supervise.main(["--restart_on_failure=1"])  # no command


def test_a_line_torn_by_a_kill_does_not_swallow_the_next_record(tmp_path):
  # A SIGKILL mid-write leaves a partial last line; the next record must start a line
  # of its own, or it is lost with the torn one (a one-off fault could then fire again).
  from rl_post.training.faults import FaultLog
  (tmp_path / "faults.jsonl").write_text('{"kind": "killed", "st')
  FaultLog(str(tmp_path)).record("checkpoint_moved_aside", 20)
  assert FaultLog(str(tmp_path)).records == [{"kind": "checkpoint_moved_aside", "step": 20}]
  log = tmp_path / supervise.RESTARTS_FILENAME
  log.write_text('{"attempt": 1, "exit')
  supervise.log_restart(str(tmp_path), {"attempt": 2})
  supervise.log_restart(str(tmp_path), {"attempt": 3})
  assert log.read_text().splitlines()[1:] == ['{"attempt": 2}', '{"attempt": 3}']
