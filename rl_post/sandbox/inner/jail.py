"""Per-run confinement primitives (stdlib + ctypes only).

Strict mode, inside the bubblewrap worker, per run:
  runner R: cloned by the zygote straight into new user, mount, pid, net,
            ipc and uts namespaces (pid 1); uid 1000 mapped to the worker's
            uid; fresh size-limited tmpfs on /work, /tmp, /dev/shm; /sandbox
            (our own code) hidden; a /proc of this run only. It becomes
            non-dumpable, forks the candidate and supervises it from pid 1:
            no signal from inside the namespace reaches it, and when it exits
            the kernel kills every process left (setsid daemons, orphans
            holding the output pipes).
  candidate D: own session, stdio only, rlimits, no capabilities (bounding,
            ambient, permitted), no-new-privs, seccomp deny list.
Process mode skips the namespaces: a runner forks the candidate into its
own session in a fresh temporary directory and kills its process group at
the end.
"""

import ctypes
import ctypes.util
import os
import resource
import signal

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6",
                   use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                       ctypes.c_ulong, ctypes.c_char_p]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong,
                       ctypes.c_ulong, ctypes.c_ulong]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
RUN_NAMESPACES = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                  CLONE_NEWIPC | CLONE_NEWUTS)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 0x4000, 1 << 18

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

SANDBOX_UID = SANDBOX_GID = 1000
WORK_DIR = "/work"


def _check(ret, what):
  if ret != 0:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
  _check(libc.mount(source and source.encode(), target.encode(),
                    fstype and fstype.encode(), flags,
                    data and data.encode()), f"mount {target}")


PR_SET_NAME = 15


def set_name(name):
  """Names the task (ps, perf, /proc/pid/comm); best effort."""
  libc.prctl(PR_SET_NAME, ctypes.cast(ctypes.c_char_p(name.encode()),
                                      ctypes.c_void_p).value, 0, 0, 0)


def set_dumpable(flag):
  _check(libc.prctl(PR_SET_DUMPABLE, int(flag), 0, 0, 0), "PR_SET_DUMPABLE")


def set_no_new_privs():
  """execve can never grant privileges again (setuid bits, file caps)."""
  _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def _write_file(path, data):
  # os-level I/O: no file objects to allocate in a freshly forked process.
  fd = os.open(path, os.O_WRONLY)
  try:
    os.write(fd, data)
  finally:
    os.close(fd)


# The GIL stays held across a PyDLL call, as PyOS_*Fork* require.
_PYDLL = ctypes.PyDLL(None, use_errno=True)
_SYSCALL = _PYDLL.syscall
_SYSCALL.restype = ctypes.c_long
_SYSCALL.argtypes = [ctypes.c_long] + [ctypes.c_ulong] * 5
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)


def clone_into_run_namespaces(flags=RUN_NAMESPACES):
  """fork() straight into fresh user, mount, pid, net, ipc, uts namespaces.

  One clone(2) instead of fork + unshare + fork: the child is pid 1 of its
  pid namespace. It is made safe for Python the way os.fork is, with
  PyOS_BeforeFork / PyOS_AfterFork_*; the zygote is single-threaded.

  Args:
    flags: the CLONE_NEW* flags (all of the run's namespaces by default).

  Returns:
    0 in the child, the child's pid in the parent.
  """
  if _SYS_CLONE is None:
    raise OSError(f"no clone syscall number for {os.uname().machine}")
  api = ctypes.pythonapi
  api.PyOS_BeforeFork()
  pid = _SYSCALL(_SYS_CLONE, flags | signal.SIGCHLD, 0, 0, 0, 0)
  if pid == 0:
    api.PyOS_AfterFork_Child()
    return 0
  err = ctypes.get_errno()
  api.PyOS_AfterFork_Parent()
  if pid < 0:
    raise OSError(err, f"clone into new namespaces: {os.strerror(err)}")
  return pid


def write_id_maps(outer_uid, outer_gid):
  """In the new user namespace: uid/gid 1000 inside = the worker's outside."""
  set_dumpable(True)  # the uid_map files of a non-dumpable task are root's
  _write_file("/proc/self/setgroups", b"deny")
  _write_file("/proc/self/uid_map", b"%d %d 1" % (SANDBOX_UID, outer_uid))
  _write_file("/proc/self/gid_map", b"%d %d 1" % (SANDBOX_GID, outer_gid))


def mount_run_filesystems(work_mb, tmp_mb):
  """Runner side: private tmpfs mounts for this run only."""
  mount(None, "/", None, MS_REC | MS_PRIVATE)
  flags = MS_NOSUID | MS_NODEV
  owner = f"uid={SANDBOX_UID},gid={SANDBOX_GID}"
  mount("tmpfs", WORK_DIR, "tmpfs", flags,
        f"size={work_mb}m,nr_inodes=4096,mode=0755,{owner}")
  mount("tmpfs", "/tmp", "tmpfs", flags,
        f"size={tmp_mb}m,nr_inodes=4096,mode=1777")
  if os.path.isdir("/dev/shm"):
    mount("tmpfs", "/dev/shm", "tmpfs", flags | MS_NOEXEC,
          f"size={tmp_mb}m,nr_inodes=256,mode=1777")
  if os.path.isdir("/sandbox"):  # our own code: not the candidate's business
    mount("tmpfs", "/sandbox", "tmpfs", flags | MS_NOEXEC | MS_RDONLY,
          "size=4k,mode=0555")


def mount_run_proc():
  """Pid 1 of the run's pid namespace: a /proc of this run only."""
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


class _CapHeader(ctypes.Structure):
  _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
  _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
              ("inheritable", ctypes.c_uint32)]


def drop_capabilities(bounding=True):
  """Empties the ambient, inheritable, permitted, effective sets.

  Args:
    bounding: also empty the bounding set (what an execve could regain).
      The init never execs, so it skips these ~40 prctl calls.
  """
  if bounding:
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
      cap += 1
  libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
  header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
  data = (_CapData * 2)()
  _check(libc.capset(ctypes.byref(header), data), "capset")


def set_limits(limits):
  """Applies per-process rlimits (soft == hard unless stated)."""
  cpu = int(limits["cpu_s"])
  table = [
      (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU, then SIGKILL
      (resource.RLIMIT_FSIZE, limits["file_bytes"], limits["file_bytes"]),
      (resource.RLIMIT_NOFILE, limits["open_files"], limits["open_files"]),
      (resource.RLIMIT_NPROC, limits["procs"], limits["procs"]),
      (resource.RLIMIT_CORE, 0, 0),
      (resource.RLIMIT_MEMLOCK, 0, 0),
      (resource.RLIMIT_MSGQUEUE, 0, 0),
  ]
  if limits.get("address_space_bytes"):
    table.append((resource.RLIMIT_AS, limits["address_space_bytes"],
                  limits["address_space_bytes"]))
  for which, soft, hard in table:
    resource.setrlimit(which, (soft, hard))


def raise_oom_score():
  """Makes the candidate the OOM killer's first choice, not the zygote."""
  try:
    _write_file("/proc/self/oom_score_adj", b"1000")
  except OSError:
    pass


def close_fds_except(keep):
  keep = sorted(set(keep))
  low = 0
  for fd in keep:
    if fd > low:
      os.closerange(low, fd)
    low = fd + 1
  os.closerange(low, 1 << 16)


def clean_environment(home):
  os.environ.clear()
  os.environ.update({
      "PATH": "/usr/local/bin:/usr/bin:/bin",
      "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
      "USER": "sandbox", "LOGNAME": "sandbox",
  })
