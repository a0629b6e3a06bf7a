"""The weaker "process" isolation, chosen explicitly."""

import pytest

from tests.sandbox.conftest import assert_attack_contained, make_pool


@pytest.fixture(scope="module")
def psb():
  pool = make_pool(isolation="process")
  yield pool
  pool.close()


def test_basic_run_env_and_files(psb):
  r = psb.run("import os\nprint(sorted(os.environ))\n"
              "open('out.txt', 'w').write(open('in.txt').read() * 2)\n",
              files={"in.txt": "ab"})
  assert r.status == "ok", r
  assert "RL_POST_TEST_SECRET" not in r.stdout
  assert r.files["out.txt"] == b"abab"


def test_timeout_and_output_limit(psb):
  r = psb.run("while True:\n  pass\n", timeout_s=1)
  assert_attack_contained(psb, r, "timeout")
  r = psb.run("while True:\n  print('x' * 1000)\n")
  assert_attack_contained(psb, r, "output_limit")


def test_setsid_daemon_swept_by_cgroup(psb):
  r = psb.run("import os, time\n"
              "if os.fork() == 0:\n"
              "  os.setsid()\n  time.sleep(60)\n"
              "print('done')\n")
  assert r.stdout == "done\n"
  assert_attack_contained(psb, r, "ok")


def test_memory_limit(psb):
  r = psb.run("x = bytearray(8 * 1024 ** 3)\n", memory_mb=128)
  assert_attack_contained(psb, r, "memory")
