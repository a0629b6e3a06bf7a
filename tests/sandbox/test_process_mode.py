"""The weaker "process" isolation, chosen explicitly."""

import pytest



@pytest.fixture(scope="module")
def psb(pool_factory):
  pool = pool_factory(isolation="process")
  yield pool
  pool.close()


def test_basic_run_env_and_files(psb, check):
  r = psb.run("import os\nprint(sorted(os.environ))\n"
              "open('out.txt', 'w').write(open('in.txt').read() * 2)\n",
              files={"in.txt": "ab"})
  assert r.status == "ok", r
  assert "RL_POST_TEST_check.secret" not in r.stdout
  assert r.files["out.txt"] == b"abab"


def test_timeout_and_output_limit(psb, check):
  r = psb.run("while True:\n  pass\n", timeout_s=1)
  check.contained(psb, r, "timeout")
  r = psb.run("while True:\n  print('x' * 1000)\n")
  check.contained(psb, r, "output_limit")


def test_setsid_daemon_swept_by_cgroup(psb, check):
  r = psb.run("import os, time\n"
              "if os.fork() == 0:\n"
              "  os.setsid()\n  time.sleep(60)\n"
              "print('done')\n")
  assert r.stdout == "done\n"
  check.contained(psb, r, "ok")


def test_memory_limit(psb, check):
  r = psb.run("x = bytearray(8 * 1024 ** 3)\n", memory_mb=128)
  check.contained(psb, r, "memory")
