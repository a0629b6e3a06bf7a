"""The Sandbox API: languages, files, parallelism, futures, errors, stats."""

import asyncio
import concurrent.futures
import os
import shutil
import sqlite3
import time

import pytest

from rl_post import sandbox as sandbox_lib
from rl_post.sandbox import RunRequest, Sandbox, SandboxConfig
from rl_post.sandbox import launcher


def test_python_ok_error_and_exit_codes(sb):
  r = sb.run("print('hi')")
  assert (r.status, r.returncode, r.stdout, r.stderr) == ("ok", 0, "hi\n", "")
  r = sb.run("raise ValueError('boom')")
  assert r.status == "error" and r.returncode == 1
  assert "ValueError: boom" in r.stderr
  r = sb.run("import sys\nsys.exit(3)")
  assert (r.status, r.returncode) == ("error", 3)
  r = sb.run("import sys\nsys.exit(0)")
  assert (r.status, r.returncode) == ("ok", 0)


def test_bash_and_sql(sb, tmp_path):
  r = sb.run("echo $((6 * 7)); ls /work", language="bash",
             files={"in.txt": "x"})
  assert r.status == "ok" and r.stdout == "42\nin.txt\n"
  db = tmp_path / "db.sqlite"
  conn = sqlite3.connect(db)
  conn.execute("create table t(a int, b text)")
  conn.executemany("insert into t values (?, ?)", [(1, "x"), (2, "y")])
  conn.commit()
  conn.close()
  original = db.read_bytes()
  r = sb.run("insert into t values (3, 'z'); select a, b from t order by a;",
             language="sql", files={"db.sqlite": original})
  assert r.status == "ok", r
  assert r.stdout == '[1, "x"]\n[2, "y"]\n[3, "z"]\n'
  assert db.read_bytes() == original  # the host database is never touched
  assert r.files["db.sqlite"] != original
  r = sb.run("select nope from missing;", language="sql")
  assert r.status == "error" and "OperationalError" in r.stderr


def test_files_in_and_out(sb):
  r = sb.run("import os\n"
             "data = open('dir/in.bin', 'rb').read()\n"
             "os.makedirs('out/sub')\n"
             "open('out/sub/x.txt', 'w').write(str(len(data)))\n"
             "os.symlink('/etc/ld.so.cache', 'link')\n",
             files={"dir/in.bin": bytes(range(256)), "a.txt": "text"})
  assert r.status == "ok", r
  assert r.files["out/sub/x.txt"] == b"256"
  assert r.files["dir/in.bin"] == bytes(range(256))
  assert r.files["a.txt"] == b"text"
  assert "link" in r.files_omitted and "link" not in r.files


def test_run_many_keeps_order(sb):
  reqs = [RunRequest(f"print({i})") for i in range(8)]
  reqs.append(dict(code="echo bash", language="bash"))
  reqs.append("print('str')")
  results = sb.run_many(reqs)
  assert [r.stdout for r in results] == (
      [f"{i}\n" for i in range(8)] + ["bash\n", "str\n"])


def test_submit_and_async(sb):
  futs = [sb.submit(f"print({i} * 2)") for i in range(4)]
  assert [f.result(timeout=30).stdout for f in futs] == [
      "0\n", "2\n", "4\n", "6\n"]
  assert isinstance(futs[0], concurrent.futures.Future)

  async def main():
    return await asyncio.gather(*(sb.run_async("print(7)") for _ in range(3)))
  assert [r.stdout for r in asyncio.run(main())] == ["7\n"] * 3


def test_stats_count_every_status(sb):
  before = sb.stats()
  sb.run("print(1)")
  sb.run("raise SystemExit(2)")
  after = sb.stats()
  assert after["status"]["ok"] == before["status"]["ok"] + 1
  assert after["status"]["error"] == before["status"]["error"] + 1
  assert after["runs"] == before["runs"] + 2
  assert after["latency_p50_s"] > 0 and after["latency_p99_s"] > 0
  assert after["isolation"] == "strict"


@pytest.mark.parametrize("kwargs, field", [
    (dict(language="ruby"), "language"),
    (dict(timeout_s=-1), "timeout_s"),
    (dict(timeout_s=float("inf")), "timeout_s"),
    (dict(memory_mb=0), "memory_mb"),
    (dict(memory_mb=1.5), "memory_mb"),
    (dict(files={"/etc/passwd": "x"}), "files"),
    (dict(files={"../up": "x"}), "files"),
    (dict(files={"a/../../b": "x"}), "files"),
    (dict(files={"": "x"}), "files"),
    (dict(files={"a": 3}), "files['a']"),
    (dict(files=["a"]), "files"),
    (dict(stdin=5), "stdin"),
])
def test_bad_inputs_name_the_field(sb, kwargs, field):
  with pytest.raises(ValueError, match=field.replace("[", r"\[").replace(
      "]", r"\]")):
    sb.run("print(1)", **kwargs)


def test_bad_code_and_oversized_input(sb):
  with pytest.raises(ValueError, match="code"):
    sb.run(12)
  with pytest.raises(ValueError, match="max_input_bytes"):
    sb.run("print(1)", stdin="x" * (sb.config.max_input_bytes + 1))
  with pytest.raises(ValueError, match=r"requests\[1\]"):
    sb.run_many(["print(1)", 42])


@pytest.mark.parametrize("kwargs, field", [
    (dict(isolation="none"), "isolation"),
    (dict(num_workers=0), "num_workers"),
    (dict(timeout_s=-1), "timeout_s"),
    (dict(memory_mb="big"), "memory_mb"),
    (dict(cgroups="maybe"), "cgroups"),
    (dict(max_open_files=4), "max_open_files"),
    (dict(python_executable="python3"), "python_executable"),
])
def test_bad_config_names_the_field(kwargs, field):
  with pytest.raises(ValueError, match=field):
    SandboxConfig(**kwargs)


def test_worker_death_is_a_counted_sandbox_error_and_recycled(check):
  with Sandbox(SandboxConfig(num_workers=1)) as pool:
    assert pool.run("print(1)").status == "ok"
    worker = pool._workers[0]  # pylint: disable=protected-access
    worker.cgroup.kill_all()  # the worker and all it started, at once
    worker.proc.wait(timeout=5)
    deadline = time.monotonic() + 5
    while worker.cgroup.pids() and time.monotonic() < deadline:
      time.sleep(0.01)
    r = pool.run("print(1)")
    assert r.status == "sandbox_error" and r.message
    stats = pool.stats()
    assert stats["status"]["sandbox_error"] == 1
    assert stats["recycles"] == 1
    check.healthy(pool)


def test_recycle_after_max_runs_and_close():
  pool = Sandbox(SandboxConfig(num_workers=1, max_runs_per_worker=2))
  outs = [pool.run(f"print({i})").stdout for i in range(5)]
  assert outs == [f"{i}\n" for i in range(5)]
  assert pool.stats()["recycles"] >= 2
  workers = list(pool._workers)  # pylint: disable=protected-access
  cgroup_dirs = [d for w in workers for d in w.cgroup.dirs.values()]
  procs = [w.proc for w in workers]
  pool.close()
  pool.close()  # idempotent
  assert all(w.proc is None and w.cgroup is None for w in workers)
  assert all(p.poll() is not None for p in procs)
  # a cgroup directory can only be removed once no process is left in it
  assert cgroup_dirs and not any(os.path.exists(d) for d in cgroup_dirs)
  with pytest.raises(RuntimeError, match="closed"):
    pool.run("print(1)")


def test_strict_without_bubblewrap_fails_with_install_hint(monkeypatch):
  real_which = shutil.which
  monkeypatch.setattr(launcher.shutil, "which",
                      lambda name: None if name == "bwrap" else
                      real_which(name))
  with pytest.raises(sandbox_lib.SandboxUnavailableError,
                     match="apt-get install -y bubblewrap"):
    Sandbox(SandboxConfig())
