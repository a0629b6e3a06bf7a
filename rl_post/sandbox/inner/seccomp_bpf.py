"""A seccomp-BPF deny list for candidate processes, built by hand (stdlib only).

The filter is installed in the candidate process after its namespaces,
mounts and capabilities are set up, so the zygote and the runner keep the
syscalls they need (unshare, mount) and the candidate loses them. Denied
calls fail with EPERM (sockets with EACCES); clone3 fails with ENOSYS so libc
falls back to clone, whose flags word is inspected (namespace flags denied);
any other architecture or the x32 ABI is killed outright.
"""

import ctypes
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6]
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16

_BPF_LD_W_ABS = 0x00 | 0x00 | 0x20
_BPF_JEQ_K = 0x05 | 0x10 | 0x00
_BPF_JGE_K = 0x05 | 0x30 | 0x00
_BPF_JSET_K = 0x05 | 0x40 | 0x00
_BPF_RET_K = 0x06 | 0x00

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_EPERM, _EACCES, _ENOSYS = 1, 13, 38

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Every CLONE_NEW* flag: creating any namespace is denied.
_CLONE_NS_MASK = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 |
                  0x10000000 | 0x20000000 | 0x40000000 | 0x00000080)

_DENIED = (
    # networking
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    # looking into or steering other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "process_madvise",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "name_to_handle_at", "open_by_handle_at",
    # kernel attack surface not needed by programs that compute things
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "fanotify_init", "syslog",
    # host administration
    "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
    "sethostname", "setdomainname", "vhangup",
)
_SOCKET_CALLS = frozenset(
    ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4"))

_X86_64 = {
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50,
    "socketpair": 53, "clone": 56, "ptrace": 101, "syslog": 103,
    "vhangup": 153, "pivot_root": 155, "adjtimex": 159, "chroot": 161,
    "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
    "setdomainname": 171, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "accept4": 288, "perf_event_open": 298,
    "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "clock_settime": 227, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440,
    "mount_setattr": 442,
}
_AARCH64 = {
    "socket": 198, "socketpair": 199, "bind": 200, "listen": 201,
    "accept": 202, "connect": 203, "accept4": 242, "clone": 220,
    "ptrace": 117, "syslog": 116, "vhangup": 58, "pivot_root": 41,
    "adjtimex": 171, "chroot": 51, "acct": 89, "settimeofday": 170,
    "mount": 40, "umount2": 39, "swapon": 224, "swapoff": 225,
    "reboot": 142, "sethostname": 161, "setdomainname": 162,
    "init_module": 105, "delete_module": 106, "quotactl": 60,
    "kexec_load": 104, "add_key": 217, "request_key": 218, "keyctl": 219,
    "unshare": 97, "perf_event_open": 241, "fanotify_init": 262,
    "name_to_handle_at": 264, "open_by_handle_at": 265,
    "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270,
    "process_vm_writev": 271, "kcmp": 272, "finit_module": 273,
    "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282,
    "clock_settime": 112, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440,
    "mount_setattr": 442,
}
_ARCHES = {
    "x86_64": (0xC000003E, _X86_64),    # AUDIT_ARCH_X86_64
    "aarch64": (0xC00000B7, _AARCH64),  # AUDIT_ARCH_AARCH64
}


def supported():
  return platform.machine() in _ARCHES


def _insn(code, k, jt=0, jf=0):
  return struct.pack("HBBI", code, jt, jf, k)


def build_filter():
  """Returns the BPF program as bytes (a sequence of struct sock_filter)."""
  machine = platform.machine()
  if machine not in _ARCHES:
    raise OSError(f"seccomp filter has no syscall table for {machine}")
  audit_arch, table = _ARCHES[machine]
  prog = [
      _insn(_BPF_LD_W_ABS, _OFF_ARCH),
      _insn(_BPF_JEQ_K, audit_arch, jt=1, jf=0),
      _insn(_BPF_RET_K, _RET_KILL_PROCESS),
      _insn(_BPF_LD_W_ABS, _OFF_NR),
  ]
  if machine == "x86_64":  # x32 ABI numbers have bit 30 set
    prog += [_insn(_BPF_JGE_K, 0x40000000, jt=0, jf=1),
             _insn(_BPF_RET_K, _RET_KILL_PROCESS)]
  for name in _DENIED:
    errno = _EACCES if name in _SOCKET_CALLS else _EPERM
    prog += [_insn(_BPF_JEQ_K, table[name], jt=0, jf=1),
             _insn(_BPF_RET_K, _RET_ERRNO | errno)]
  prog += [_insn(_BPF_JEQ_K, table["clone3"], jt=0, jf=1),
           _insn(_BPF_RET_K, _RET_ERRNO | _ENOSYS)]
  # clone: load the low word of the flags and deny namespace flags.
  prog += [_insn(_BPF_JEQ_K, table["clone"], jt=0, jf=3),
           _insn(_BPF_LD_W_ABS, _OFF_ARG0_LO),
           _insn(_BPF_JSET_K, _CLONE_NS_MASK, jt=0, jf=1),
           _insn(_BPF_RET_K, _RET_ERRNO | _EPERM)]
  prog.append(_insn(_BPF_RET_K, _RET_ALLOW))
  return b"".join(prog)


class _SockFprog(ctypes.Structure):
  _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PROGRAM = None


def install(libc):
  """Sets no-new-privs and installs the filter on the calling thread."""
  global _PROGRAM
  if _PROGRAM is None:
    _PROGRAM = build_filter()
  program = _PROGRAM
  buf = ctypes.create_string_buffer(program, len(program))
  fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
  if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
  if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER,
                ctypes.addressof(fprog), 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
