"""How a worker process is started: staging, uid drop, cgroup join, bwrap.

Strict workers are started as
  [sh -c 'join cgroups; exec ...'] [setpriv --reuid=U ...] bwrap <root> \
      python -I -S -B /sandbox/zygote.py --mode strict
where the bubblewrap root is read-only and minimal: /usr (interpreter,
libraries, coreutils), the /lib* and /bin symlinks, /etc/ld.so.cache, a
private /proc and /dev (read-only), an empty /work and a private /tmp.
No /home, /root, /etc/passwd, /var, host /tmp or the repository.
"""

import os
import shutil
import subprocess
import sys
import tempfile

INNER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inner")
_INNER_FILES = ("zygote.py", "runner.py", "candidate.py", "supervise.py",
                "jail.py", "harness.py", "seccomp_bpf.py", "wire.py")

INSTALL_HINT = ("Install it as root: `apt-get install -y bubblewrap` "
                "(Debian/Ubuntu) and make sure unprivileged user namespaces "
                "are enabled (`sysctl -w user.max_user_namespaces=15000`; on "
                "Ubuntu 24.04+ also `sysctl -w "
                "kernel.apparmor_restrict_unprivileged_userns=0`). Or pass "
                "SandboxConfig(isolation='process') to accept weaker "
                "isolation explicitly.")


class SandboxUnavailableError(RuntimeError):
  """Strict isolation cannot be provided on this host."""


def stage_inner_code():
  """Copies the in-sandbox modules to a fresh directory anyone can read.

  The repository may live under a directory the sandbox uid cannot enter
  (e.g. /root); the copy also means a worker never sees the repository.
  """
  stage = tempfile.mkdtemp(prefix="rl_post_sandbox_")
  os.chmod(stage, 0o755)
  for name in _INNER_FILES:
    dst = os.path.join(stage, name)
    shutil.copyfile(os.path.join(INNER_DIR, name), dst)
    os.chmod(dst, 0o644)
  return stage


def _uid_drop(config):
  if os.geteuid() != 0:
    return []
  setpriv = shutil.which("setpriv")
  if setpriv is None:
    raise SandboxUnavailableError(
        "running as root but `setpriv` (util-linux) is missing; it is used "
        "to drop workers to an unprivileged uid. `apt-get install "
        "util-linux`.")
  return [setpriv, f"--reuid={config.sandbox_uid}",
          f"--regid={config.sandbox_gid}", "--clear-groups", "--"]


def _cgroup_join(cgroup):
  if cgroup is None:
    return []
  return (["/bin/sh", "-c",
           'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; '
           'done; while [ "$1" != -- ]; do shift; done; shift; exec "$@"',
           "sh"] + cgroup.procs_files() + ["--"])


def _root_binds(config):
  args = ["--ro-bind", "/usr", "/usr"]
  for path in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
    if os.path.islink(path):
      args += ["--symlink", os.readlink(path), path]
    elif os.path.isdir(path):
      args += ["--ro-bind", path, path]
  args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
  python = os.path.realpath(config.python_executable)
  if not python.startswith("/usr/"):
    prefix = os.path.dirname(os.path.dirname(python))
    args += ["--ro-bind", prefix, prefix]
  for path in config.extra_ro_paths:
    args += ["--ro-bind", path, path]
  return args


def strict_argv(config, stage):
  bwrap = shutil.which("bwrap")
  if bwrap is None:
    raise SandboxUnavailableError(
        "strict isolation needs bubblewrap (`bwrap`), which is not "
        "installed. " + INSTALL_HINT)
  return ([bwrap,
           "--unshare-user", "--unshare-pid", "--unshare-net",
           "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--clearenv",
           "--setenv", "PATH", "/usr/bin:/bin",
           "--hostname", "sandbox"]
          + _root_binds(config)
          + ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--tmpfs", "/tmp", "--dir", "/work",
             "--ro-bind", stage, "/sandbox",
             "--remount-ro", "/", "--chdir", "/",
             config.python_executable, "-I", "-S", "-B",
             "/sandbox/zygote.py", "--mode", "strict"]
          + _zygote_flags(config))


def _zygote_flags(config, tmp_root=None):
  flags = ["--preload", ",".join(config.preload_modules),
           "--work-mb", str(config.work_dir_mb), "--tmp-mb", str(config.tmp_mb)]
  if tmp_root is not None:
    flags += ["--tmp-root", tmp_root]
  return flags


def process_argv(config, stage, tmp_root="/tmp"):
  return ([config.python_executable, "-I", "-S", "-B",
           os.path.join(stage, "zygote.py"), "--mode", "process"]
          + _zygote_flags(config, tmp_root))


def spawn(config, stage, cgroup, log_path, tmp_root):
  """Starts one worker; returns the Popen (stdin/stdout are the channel).

  tmp_root: where process mode makes each run's work dir (strict mode
  mounts a fresh tmpfs instead).
  """
  if config.isolation == "strict":
    argv = strict_argv(config, stage)
  else:
    argv = process_argv(config, stage, tmp_root)
  argv = _cgroup_join(cgroup) + _uid_drop(config) + argv
  with open(log_path, "ab") as log:
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
        env={"PATH": "/usr/bin:/bin"}, cwd="/", close_fds=True,
        start_new_session=True, bufsize=0)


def check_host(config):
  """Fails early, with what is missing and how to install it."""
  if not sys.platform.startswith("linux"):
    raise SandboxUnavailableError(
        f"the sandbox needs Linux; this is {sys.platform}")
  if not os.access(config.python_executable, os.X_OK):
    raise SandboxUnavailableError(
        f"sandbox interpreter {config.python_executable} is missing or not "
        "executable; install python3 (`apt-get install -y python3`) or set "
        "SandboxConfig.python_executable")
  if config.isolation == "strict":
    strict_argv(config, "/nonexistent")  # raises if bwrap is missing
    path = "/proc/sys/user/max_user_namespaces"
    try:
      with open(path) as f:
        if int(f.read()) == 0:
          raise SandboxUnavailableError(
              "user namespaces are disabled (user.max_user_namespaces=0). "
              + INSTALL_HINT)
    except OSError:
      pass
