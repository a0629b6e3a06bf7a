"""Runs prepared ahead: fresh per run, and recovered when they die idle.

In strict mode each worker keeps the next run's runner (pid 1 of fresh
namespaces) and candidate prepared while the current run executes.
"""

import os
import signal
import time

from rl_post.sandbox import Sandbox, SandboxConfig


def _names(worker):
  """{host pid: name} of the worker's live processes."""
  names = {}
  for pid in worker.cgroup.pids():
    try:
      with open(f"/proc/{pid}/comm") as f:
        names[pid] = f.read().strip()
    except OSError:
      pass
  return names


def _prepared_pids(pool, name):
  """Host pids of the worker's prepared processes called `name`."""
  worker = pool._workers[0]  # pylint: disable=protected-access
  deadline = time.monotonic() + 5
  while True:
    pids = [p for p, n in _names(worker).items() if n == name]
    if len(pids) == 1 or time.monotonic() > deadline:
      return pids
    time.sleep(0.02)


def test_every_run_gets_fresh_namespaces_although_prepared_ahead():
  code = ("import os\n"
          "print(os.readlink('/proc/self/ns/net'), os.readlink("
          "'/proc/self/ns/mnt'), os.readlink('/proc/self/ns/pid'))\n"
          "open('/tmp/mark', 'w').write('x')\n"
          "print(sorted(os.listdir('/tmp')), sorted(os.listdir('.')))")
  with Sandbox(SandboxConfig(num_workers=1)) as pool:
    outs = [pool.run(code) for _ in range(4)]
  assert all(r.status == "ok" for r in outs), outs
  namespaces = [r.stdout.splitlines()[0] for r in outs]
  assert len(set(namespaces)) == 4, namespaces
  # nothing a run wrote is visible to the next one, prepared during it
  assert all(r.stdout.splitlines()[1] == "['mark'] []" for r in outs), outs


def test_prepared_runner_killed_while_idle_is_replaced(check):
  with Sandbox(SandboxConfig(num_workers=1)) as pool:
    assert pool.run("print(1)").status == "ok"
    (runner,) = _prepared_pids(pool, "sb-runner")
    os.kill(runner, signal.SIGKILL)  # no sleep: it may still be dying
    r = pool.run("print(2)")
    assert r.status == "ok" and r.stdout == "2\n", r
    assert pool.stats()["recycles"] == 0
    check.healthy(pool)


def test_prepared_candidate_killed_while_idle_is_replaced(check):
  with Sandbox(SandboxConfig(num_workers=1)) as pool:
    assert pool.run("print(1)").status == "ok"
    (candidate,) = _prepared_pids(pool, "sb-candidate")
    os.kill(candidate, signal.SIGKILL)
    time.sleep(0.2)  # dead before the request comes (as after an OOM kill)
    r = pool.run("print(2)")
    assert r.status == "ok" and r.stdout == "2\n", r
    stats = pool.stats()
    assert stats["status"]["sandbox_error"] == 0 and stats["recycles"] == 0
    check.healthy(pool)


def test_wall_time_counts_from_the_request_not_from_preparation():
  with Sandbox(SandboxConfig(num_workers=1, timeout_s=1.0)) as pool:
    assert pool.run("print(1)").status == "ok"
    time.sleep(1.5)  # the next run has been prepared for longer than this
    r = pool.run("import time; time.sleep(0.3); print('done')")
    assert r.status == "ok" and r.stdout == "done\n", r
    assert 0.3 <= r.wall_s < 1.0


def test_next_run_is_prepared_even_if_the_current_one_exhausts_processes(
    check):
  # The next run is prepared while this one holds every process slot, so
  # preparing it fails; it must be prepared again, not reported as an error.
  hog = ("import os, time\n"
         "kids = []\n"
         "try:\n"
         "  while True:\n"
         "    pid = os.fork()\n"
         "    if pid == 0:\n"
         "      time.sleep(30); os._exit(0)\n"
         "    kids.append(pid)\n"
         "except OSError:\n"
         "  pass\n"
         "print(len(kids)); time.sleep(1.0)\n")
  with Sandbox(SandboxConfig(num_workers=1, max_procs=16)) as pool:
    for _ in range(3):
      r = pool.run(hog)
      assert r.status == "ok" and int(r.stdout) >= 8, r
      r = pool.run("print(7)")
      assert r.status == "ok" and r.stdout == "7\n", r
    assert pool.stats()["status"]["sandbox_error"] == 0
    check.healthy(pool)


def test_preparing_ahead_is_per_request():
  # The pool asks for it only while a CPU is left over for the preparation.
  from rl_post.sandbox import request as request_lib  # pylint: disable=g-import-not-at-top
  with Sandbox(SandboxConfig(num_workers=1)) as pool:
    worker = pool._workers[0]  # pylint: disable=protected-access
    wire_req = request_lib.to_wire(pool.config, request_lib.RunRequest("1"))
    for ahead in (False, True, False):
      assert worker.run(wire_req, prepare_ahead=ahead).status == "ok"
      expect = ["sb-candidate", "sb-runner"] if ahead else []
      deadline = time.monotonic() + 5
      while True:
        names = list(_names(worker).values())
        got = sorted(n for n in names if n.startswith("sb-"))
        if got == expect or time.monotonic() > deadline:
          break
        time.sleep(0.02)
      assert got == expect, (ahead, names)
