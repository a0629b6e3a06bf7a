"""One test per attack on the strict sandbox (see issue 3).

Each test asserts the status, that the host is unchanged, that no process
of the run is left, and that the pool is still healthy afterwards.
"""

import os
import socket
import uuid

import pytest

from rl_post.sandbox import RunRequest


# -- processes ----------------------------------------------------------------
def test_fork_bomb(sb, check):
  r = sb.run("import os\nwhile True:\n  try:\n    os.fork()\n"
             "  except OSError:\n    pass\n", timeout_s=2)
  check.contained(sb, r, "timeout")


def test_bash_fork_bomb(sb, check):
  r = sb.run(":(){ :|:& };:\nsleep 1\n", language="bash", timeout_s=2)
  check.contained(sb, r, ("ok", "error", "timeout"))


def test_setsid_daemons_are_killed_and_do_not_delay(sb, check):
  r = sb.run(
      "import os, time\n"
      "for _ in range(3):\n"
      "  if os.fork() == 0:\n"
      "    os.setsid()\n"
      "    if os.fork() == 0:\n"
      "      time.sleep(60)\n"
      "    os._exit(0)\n"
      "print('parent done')\n", timeout_s=5)
  assert r.stdout == "parent done\n"
  assert r.wall_s < 3.0
  check.contained(sb, r, "ok")


def test_delayed_orphan_writes_are_dropped(sb, check):
  r = sb.run(
      "import os, sys, time\n"
      "if os.fork() == 0:\n"
      "  time.sleep(3)\n"
      "  print('orphan', flush=True)\n"
      "  open('late.txt', 'w').write('late')\n"
      "  os._exit(0)\n"
      "print('main', flush=True)\n", timeout_s=5)
  assert r.stdout == "main\n" and "late.txt" not in r.files
  assert r.wall_s < 2.5  # the orphan was killed, not waited for
  check.contained(sb, r, "ok")


def test_kill_parent_and_kill_all(sb, check):
  r = sb.run("import os, signal\n"
             "for pid in (os.getppid(), 1, -1, 0):\n"
             "  try:\n    os.kill(pid, signal.SIGKILL) if pid else None\n"
             "  except OSError as e:\n    print(pid, e.errno)\n"
             "print('alive')\n")
  assert "alive" in r.stdout
  check.contained(sb, r, "ok")


# -- memory -------------------------------------------------------------------
def test_memory_bomb_single(sb, check):
  r = sb.run("x = bytearray(8 * 1024 ** 3)\n", memory_mb=128)
  check.contained(sb, r, "memory")


def test_memory_bomb_gradual(sb, check):
  r = sb.run("chunks = []\nwhile True:\n  chunks.append(b'x' * (1 << 20))\n",
             memory_mb=128, timeout_s=10)
  check.contained(sb, r, "memory")


def test_memory_bomb_across_children(sb, check):
  # Each child stays under the per-process limit; together they do not.
  r = sb.run(
      "import os, time\n"
      "pids = []\n"
      "for _ in range(6):\n"
      "  pid = os.fork()\n"
      "  if pid == 0:\n"
      "    x = b'x' * (100 << 20)\n"
      "    time.sleep(3)\n"
      "    os._exit(0)\n"
      "  pids.append(pid)\n"
      "for pid in pids:\n  os.waitpid(pid, 0)\n",
      memory_mb=128, timeout_s=10)
  check.contained(sb, r, "memory")


# -- time ---------------------------------------------------------------------
def test_cpu_loop(sb, check):
  r = sb.run("while True:\n  pass\n", timeout_s=1)
  assert r.wall_s < 3
  check.contained(sb, r, "timeout")


def test_threads(sb, check):
  r = sb.run("import threading\n"
             "def spin():\n  while True:\n    pass\n"
             "ts = []\n"
             "for _ in range(200):\n"
             "  try:\n    t = threading.Thread(target=spin); t.start()\n"
             "  except RuntimeError:\n    break\n", timeout_s=1)
  check.contained(sb, r, "timeout")


def test_sleep(sb, check):
  r = sb.run("import time\ntime.sleep(100)\n", timeout_s=1)
  assert r.wall_s < 3
  check.contained(sb, r, "timeout")


def test_ignored_signals(sb, check):
  r = sb.run("import signal\n"
             "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU,\n"
             "          signal.SIGHUP, signal.SIGALRM):\n"
             "  signal.signal(s, signal.SIG_IGN)\n"
             "while True:\n  pass\n", timeout_s=1)
  check.contained(sb, r, "timeout")


def test_swallowed_timeout_exceptions(sb, check):
  r = sb.run("import time\n"
             "while True:\n"
             "  try:\n    time.sleep(10)\n"
             "  except BaseException:\n    pass\n", timeout_s=1)
  check.contained(sb, r, "timeout")


# -- output -------------------------------------------------------------------
def test_stdout_flood(sb, check):
  r = sb.run("import sys\nwhile True:\n  sys.stdout.write('x' * 65536)\n")
  assert len(r.stdout_bytes) <= sb.config.max_output_bytes
  check.contained(sb, r, "output_limit")


def test_stderr_flood_from_bash(sb, check):
  r = sb.run("yes flood >&2", language="bash")
  assert len(r.stderr_bytes) <= sb.config.max_output_bytes
  check.contained(sb, r, "output_limit")


def test_binary_output(sb, check):
  r = sb.run("import sys\nsys.stdout.buffer.write(bytes(range(256)) * 4)\n")
  assert r.stdout_bytes == bytes(range(256)) * 4
  check.contained(sb, r, "ok")


def test_closed_stdio(sb, check):
  r = sb.run("import os\nos.close(0)\nos.close(1)\nos.close(2)\n"
             "print('into the void')\n")
  assert r.stdout == ""
  check.contained(sb, r, ("ok", "error"))


# -- filesystem -----------------------------------------------------------------
def test_writes_to_host_and_system_paths(sb, check):
  marker = f"/tmp/rl_post_sandbox_pwned_{uuid.uuid4().hex}"
  here = os.path.abspath(__file__)
  targets = [marker, "/etc/passwd", "/usr/bin/pwned", "/root/pwned",
             "/pwned", "/dev/pwned", "/proc/sys/kernel/hostname",
             "/sandbox/pwned", here, os.path.dirname(here) + "/pwned"]
  r = sb.run("import os\n"
             f"for path in {targets!r}:\n"
             "  try:\n"
             "    with open(path, 'a') as f:\n      f.write('pwned')\n"
             "    print('WROTE', path)\n"
             "  except OSError as e:\n"
             "    print('denied', path, e.errno)\n")
  # /tmp inside is the run's private tmpfs: writing there is allowed, but
  # the host's /tmp must not change.
  wrote = [l for l in r.stdout.splitlines() if l.startswith("WROTE")]
  assert wrote == [f"WROTE {marker}"], r.stdout
  assert not os.path.exists(marker)
  assert not os.path.exists(os.path.dirname(here) + "/pwned")
  with open(here) as f:
    assert "pwned" not in f.read()[-100:]
  check.contained(sb, r, "ok")


def test_state_does_not_persist_between_runs(sb, check):
  write = ("import json, os, builtins\n"
           "open('/work/keep', 'w').write('x')\n"
           "open('/tmp/keep', 'w').write('x')\n"
           "open('/dev/shm/keep', 'w').write('x')\n"
           "json.persisted = True\nbuiltins.persisted = True\n")
  probe = ("import json, os, builtins\n"
           "print([os.path.exists(p) for p in\n"
           "       ('/work/keep', '/tmp/keep', '/dev/shm/keep')],\n"
           "      hasattr(json, 'persisted'), hasattr(builtins, 'persisted'))\n")
  n = 2 * sb.config.num_workers
  assert all(r.status == "ok" for r in sb.run_many([write] * n))
  for r in sb.run_many([probe] * n):
    assert r.stdout == "[False, False, False] False False\n", r
  check.healthy(sb)


def test_environment_secrets_and_host_files_are_invisible(sb, check):
  host_file = f"/tmp/rl_post_sandbox_secret_{uuid.uuid4().hex}"
  with open(host_file, "w") as f:
    f.write(check.secret)
  try:
    r = sb.run(
        "import os\n"
        "print(dict(os.environ))\n"
        f"for path in ['/proc/self/environ', '/proc/1/environ', {host_file!r},\n"
        "             '/etc/shadow', '/etc/passwd', '/root/.bashrc',\n"
        f"             {os.path.abspath(__file__)!r}, '/proc/1/cmdline']:\n"
        "  try:\n    print(path, open(path, 'rb').read()[:4000])\n"
        "  except OSError as e:\n    print(path, 'denied', e.errno)\n")
  finally:
    os.remove(host_file)
  assert check.secret not in r.stdout and "RL_POST_TEST_check.secret" not in r.stdout
  assert "/etc/shadow denied" in r.stdout
  assert f"{host_file} denied" in r.stdout
  check.contained(sb, r, "ok")


def test_deep_recursion(sb, check):
  r = sb.run("import sys\nsys.setrecursionlimit(10 ** 7)\n"
             "def f(n):\n  return f(n + 1) + 1\nf(0)\n", timeout_s=3)
  # 3.11 keeps Python frames off the C stack: the heap runs out (memory) or
  # the C stack does (SIGSEGV, error) or unwinding is slow (timeout).
  check.contained(sb, r, ("error", "memory", "timeout"))


def test_fd_exhaustion(sb, check):
  r = sb.run("fs = []\n"
             "try:\n  while True:\n    fs.append(open('/dev/null'))\n"
             "except OSError as e:\n  print(len(fs), e.errno)\n")
  opened = int(r.stdout.split()[0])
  assert opened < sb.config.max_open_files
  check.contained(sb, r, "ok")


def test_huge_and_sparse_files(sb, check):
  r = sb.run("import os\n"
             "for size in (10 ** 12, 10 ** 9):\n"
             "  try:\n"
             "    with open(f'sparse{size}', 'wb') as f:\n"
             "      f.truncate(size)\n    print('truncated', size)\n"
             "  except OSError as e:\n    print('denied', size, e.errno)\n"
             "try:\n"
             "  with open('big', 'wb') as f:\n"
             "    for _ in range(1024):\n      f.write(b'x' * (1 << 20))\n"
             "except OSError as e:\n  print('big stopped', e.errno)\n")
  assert "truncated" not in r.stdout and "big stopped" in r.stdout, r.stdout
  total = sum(len(v) for v in r.files.values())
  assert total <= sb.config.max_files_out_mb << 20
  check.contained(sb, r, "ok")


def test_many_files(sb, check):
  r = sb.run("n = 0\n"
             "try:\n  while n < 100000:\n"
             "    open(f'f{n}', 'w').close(); n += 1\n"
             "except OSError as e:\n  print('stopped', n, e.errno)\n")
  assert "stopped" in r.stdout
  assert len(r.files) <= sb.config.max_files_out
  check.contained(sb, r, "ok")


def test_reading_stdin(sb, check):
  r = sb.run("import sys\nprint(repr(sys.stdin.read()))\n")
  assert r.stdout == "''\n"
  r = sb.run("import sys\nprint(sys.stdin.read().upper())\n", stdin="abc")
  assert r.stdout == "ABC\n"
  check.contained(sb, r, "ok")


# -- network ------------------------------------------------------------------
def test_tcp_and_unix_sockets_to_host_listeners(sb, tmp_path, check):
  tcp = socket.socket()
  tcp.bind(("127.0.0.1", 0))
  tcp.listen(8)
  tcp.settimeout(0.5)
  port = tcp.getsockname()[1]
  path = str(tmp_path / "host.sock")
  unix = socket.socket(socket.AF_UNIX)
  unix.bind(path)
  unix.listen(8)
  abstract = socket.socket(socket.AF_UNIX)
  name = "\0rl_post_sandbox_" + uuid.uuid4().hex
  abstract.bind(name)
  abstract.listen(8)
  try:
    r = sb.run(
        "import socket\n"
        f"for fam, addr in [(socket.AF_INET, ('127.0.0.1', {port})),\n"
        f"                  (socket.AF_UNIX, {path!r}),\n"
        f"                  (socket.AF_UNIX, {name!r})]:\n"
        "  try:\n"
        "    s = socket.socket(fam); s.settimeout(1); s.connect(addr)\n"
        "    print('CONNECTED', addr)\n"
        "  except OSError as e:\n    print('denied', e.errno)\n")
    with pytest.raises(OSError):
      tcp.accept()
    for s in (unix, abstract):
      s.settimeout(0.1)
      with pytest.raises(OSError):
        s.accept()
  finally:
    for s in (tcp, unix, abstract):
      s.close()
  assert "CONNECTED" not in r.stdout and r.stdout.count("denied") == 3
  check.contained(sb, r, "ok")


# -- kernel interfaces ------------------------------------------------------------
def test_ptrace_unshare_mount_are_denied(sb, check):
  r = sb.run(
      "import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print('ptrace', libc.ptrace(0, 0, 0, 0), ctypes.get_errno())\n"
      "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
      "print('mount', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),\n"
      "      ctypes.get_errno())\n"
      "print('setns', libc.setns(0, 0), ctypes.get_errno())\n")
  for line in r.stdout.splitlines():
    name, ret, _ = line.split()
    assert ret == "-1", line
  assert len(r.stdout.splitlines()) == 4
  r2 = sb.run("unshare -r true && echo UNSHARED; "
              "mount -t tmpfs none /tmp && echo MOUNTED; echo end",
              language="bash")
  assert "UNSHARED" not in r2.stdout and "MOUNTED" not in r2.stdout
  check.contained(sb, r2, "ok")


def test_no_capabilities_and_no_new_privs(sb, check):
  r = sb.run("for line in open('/proc/self/status'):\n"
             "  if line.startswith(('Cap', 'NoNewPrivs', 'Seccomp:', 'Uid')):\n"
             "    print(line.strip())\n")
  fields = dict(line.split(":\t") for line in r.stdout.splitlines())
  for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
    assert int(fields[cap], 16) == 0, fields
  assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"
  assert fields["Uid"].split()[0] != "0"
  check.contained(sb, r, "ok")


def test_nul_in_source(sb, check):
  r = sb.run("print('before')\x00print('after')\n")
  assert "after" not in r.stdout
  check.contained(sb, r, "error")


def test_concurrent_attacks_do_not_interfere(sb, check):
  reqs = ["while True:\n  pass\n", "print('fine')"] * 2
  results = sb.run_many([dict(code=c, timeout_s=1) for c in reqs])
  assert [r.status for r in results] == ["timeout", "ok"] * 2
  check.healthy(sb)


def test_no_data_from_earlier_runs_in_memory(sb, check):
  # A later run forked from the same zygote scans its whole address space
  # for an earlier run's code, stdin, files and output. The pattern is built
  # with character classes so the scanner never holds the literal itself.
  mark = uuid.uuid4().hex
  writer = RunRequest(f"print('LEAKCODE{mark}', input())\n",
                      stdin=f"LEAKSTDIN{mark}",
                      files={"f.txt": f"LEAKFILE{mark}"})
  pattern = "".join(f"[{c}]" for c in mark)
  scanner = (
      "import re\n"
      f"pat = re.compile(rb'L[E]AK[A-Z]+{pattern}')\n"
      "found = set()\n"
      "mem = open('/proc/self/mem', 'rb', 0)\n"
      "for line in open('/proc/self/maps'):\n"
      "  addr, perms = line.split()[:2]\n"
      "  if 'r' not in perms or '[v' in line:\n"
      "    continue\n"
      "  lo, hi = (int(x, 16) for x in addr.split('-'))\n"
      "  try:\n"
      "    mem.seek(lo)\n"
      "    data = mem.read(hi - lo)\n"
      "  except (OSError, ValueError, OverflowError):\n"
      "    continue\n"
      "  found.update(m.group()[:9] for m in pat.finditer(data))\n"
      "print(sorted(found))\n")
  n = 2 * sb.config.num_workers
  for r in sb.run_many([writer] * n):
    assert r.status == "ok" and f"LEAKCODE{mark} LEAKSTDIN{mark}" in r.stdout
  for r in sb.run_many([dict(code=scanner, timeout_s=20)] * n):
    assert r.status == "ok" and r.stdout == "[]\n", r
  check.healthy(sb)


def test_candidate_cannot_claim_a_sandbox_error(sb, check):
  r = sb.run("import os\n"
             "for fd in range(3, 64):\n"
             "  try:\n    os.write(fd, b'Efake setup failure')\n"
             "  except OSError:\n    pass\n"
             "print('done')\n")
  assert r.stdout == "done\n"
  check.contained(sb, r, "ok")
