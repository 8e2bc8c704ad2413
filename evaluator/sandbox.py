"""The evaluation child's OS sandbox: Landlock (Linux 5.13+) and a seccomp filter, both unprivileged.

Strict mode's audit hook (evaluator.strict.SideEffectMonitor) sees what Python does; native code (a C++
extension, ctypes, torch.save's C++ file writer) makes its system calls directly. The kernel holds those
too, for the calling thread and every thread and process it starts afterwards, and cannot be asked to
lift it. `restrict()` runs in the child before torch is imported (so before any thread exists).

Profile "narrow" (the default):
* files are created, written, truncated, renamed or removed only beneath the given folders (the
  evaluation's work directory, holding the candidate's HOME and TMPDIR, and its candidate's folder of
  the build cache), the
  child's own /proc/PID, and the device files of `_writable_devices` (no /dev/shm: files there outlive
  the evaluation); reads only of `_readable_roots` (the system, this Python and its import path, the
  CUDA toolkit: not homes, /tmp, /etc's secrets, terminals, or other processes' /proc entries, whose
  environ holds the harness's API keys) and of the `readable` folders (the binding-object cache, which
  only the harness writes); ioctls only on the GPU's device files (ABI 5+);
* no TCP connect or bind (Landlock ABI 4+, Linux 6.7); no signals to processes outside the sandbox,
  such as the harness, and no abstract UNIX sockets (ABI 6+, Linux 6.12);
* no device nodes anywhere;
* (x86_64) no capabilities, and a seccomp filter: no chmod, chown, extended-attribute changes,
  io_uring, System V IPC, keyrings, setuid/setgid/sticky modes at creation, sockets but unconnected
  AF_UNIX stream ones and socketpairs (connect() fails), typing into terminals (TIOCSTI), resource
  limits of other processes (prlimit), nor any i386 or x32 system call.

Profile "wide": Landlock as above but with all of /dev and /proc writable, all reads allowed, and no
capability drop or seccomp filter. It is the configuration measured to let CUDA start on the H200
machine (2026-11-30); `choose_profile` uses it only where a probe finds that CUDA does not start under
"narrow".

A denied call fails with EACCES or EPERM. Landlock's constants and struct layouts are those of
include/uapi/linux/landlock.h (https://docs.kernel.org/userspace-api/landlock.html); seccomp's of
include/uapi/linux/seccomp.h and linux/filter.h. The evaluation writes only its own candidate's folder
of the build cache (`evaluator.runner.candidate_build_root`), so it cannot change what another source's
evaluation loads. Still open: timestamps (utimes); reading the files on the import path (of the project's
folder only its imported packages: `_import_root`).
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import sys
from pathlib import Path

from kb_agent.evaluator.procs import listdir

# syscall numbers: the same in the unified table of x86_64, aarch64 and the other 64-bit Linux ports
_NR_CREATE_RULESET, _NR_ADD_RULE, _NR_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*: every right that changes the file system, by the ABI that introduced it
_FS_WRITE_BY_ABI = {
    1: (1 << 1)  # WRITE_FILE
    | (1 << 4)  # REMOVE_DIR
    | (1 << 5)  # REMOVE_FILE
    | (1 << 6)  # MAKE_CHAR
    | (1 << 7)  # MAKE_DIR
    | (1 << 8)  # MAKE_REG
    | (1 << 9)  # MAKE_SOCK
    | (1 << 10)  # MAKE_FIFO
    | (1 << 11)  # MAKE_BLOCK
    | (1 << 12),  # MAKE_SYM
    2: 1 << 13,  # REFER (links and renames across folders)
    3: 1 << 14,  # TRUNCATE
}
_READ = (1 << 2) | (1 << 3)  # LANDLOCK_ACCESS_FS_READ_FILE | READ_DIR
_IOCTL_DEV = 1 << 15  # LANDLOCK_ACCESS_FS_IOCTL_DEV, ABI 5: a terminal's settings are ioctls
_MAKE_DEVICE = (1 << 6) | (1 << 11)  # MAKE_CHAR | MAKE_BLOCK: handled, and allowed nowhere
_NET_TCP = (1 << 0) | (1 << 1)  # LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP, ABI 4
_SCOPES = (1 << 0) | (1 << 1)  # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | SIGNAL, ABI 6


# The "wide" profile: the CUDA driver writes under /proc as it starts (measured on the H200 machine:
# with /dev writable but not /proc, cuInit fails with cudaErrorOperatingSystem, 304). Other processes'
# /proc/PID/mem stays out of reach even then: Landlock denies ptrace outside the sandbox.
_WIDE = ("/dev", "/proc")
PROFILES = ("narrow", "wide")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class SandboxUnavailable(RuntimeError):
    """This platform or kernel has no Landlock, or refused the ruleset; the message says which."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _call(libc, nr: int, *args) -> int:
    r = libc.syscall(ctypes.c_long(nr), *args)
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return r


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (1, 2, ...); 0 where there is none (not Linux, not built, or
    turned off at boot)."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64", "riscv64"):
        return 0
    try:
        return _call(
            _libc(), _NR_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        )
    except OSError:
        return 0


def _writable_devices() -> list[str]:
    """The device files a GPU evaluation reads and writes: the null-like ones and NVIDIA's (no /dev/shm:
    files there outlive the evaluation, a channel to the next one; no terminals)."""
    found = [f"/dev/{n}" for n in ("null", "zero", "full", "random", "urandom")]
    found += [f"/dev/{n}" for n in listdir("/dev") if n.startswith("nvidia")]
    return [p for p in found if os.path.exists(p)]


_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/sys")
_ETC_SECRETS = {"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl", "security"}
_PROC_HIDDEN = {"self", "thread-self", "keys", "key-users", "kcore", "kmsg"}


def _readable_roots() -> list[str]:
    """Where the narrow profile lets the child read, beside its writable folders and devices: the
    system's programs and libraries, /etc but its secrets, /proc but other processes' entries (their
    environ holds the harness's API keys), this Python's prefixes and import path (site-packages; of the
    project's folder only the packages the child imports, `_import_root`), the CUDA toolkit and
    `CUDA_HDR_DIR`. Not: home folders, /tmp (other evaluations'
    candidates), /root, /var, /run (sockets), other device files (terminals)."""
    out = list(_SYSTEM)
    out += [f"/etc/{e}" for e in listdir("/etc") if e not in _ETC_SECRETS]
    out += [f"/proc/{e}" for e in listdir("/proc") if not e.isdigit() and e not in _PROC_HIDDEN]
    out += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    imports = [p for p in sys.path if p] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    out += [q for p in imports for q in _import_root(p)]
    # CUDA_HDR_DIR: the headers of a CUDA build of torch for the CPU machine's compile check (README); one
    # unpacked into /tmp or a home folder had every CUDA candidate's check fail "Permission denied"
    # (helper-29)
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_HDR_DIR"):
        if os.environ.get(var):
            out.append(os.environ[var])
    from kb_agent.evaluator.build import find_nvcc

    tools = [find_nvcc(), *(shutil.which(t) for t in ("ninja", "g++", "gcc"))]
    out += [str(Path(os.path.realpath(t)).parent.parent) for t in tools if t]  # the builds' toolkits
    return [p for p in dict.fromkeys(out) if os.path.exists(p) and p != "/"]


# the project's folders that the child imports (kb_agent.evaluator, kb_agent.problems, through kb_agent)
_CHILD_PACKAGES = ("kb_agent", "evaluator", "problems")
_PROJECT = Path(__file__).resolve().parent.parent


def _import_root(path: str) -> list[str]:
    """What the child may read of one folder on the import path: the folder, but for this project's
    folder (a source checkout on PYTHONPATH, the GPU machine's way, or an editable install's), of which
    only the packages the child imports: the project's folder also holds `.env` files, `runs/kb.sqlite`
    and whatever else its user keeps there (helper-31 read an API key from `.env.local`)."""
    try:
        if Path(path).resolve() == _PROJECT:
            return [str(_PROJECT / p) for p in _CHILD_PACKAGES]
    except OSError:
        pass
    return [path]


def _add_rule(libc, ruleset: int, path: str, rights: int) -> None:
    """Allow `rights` beneath `path` (or on it, for a file) in `ruleset`. Raises OSError."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _call(libc, _NR_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
              ctypes.c_uint32(0))  # fmt: skip
    finally:
        os.close(fd)


def restrict(
    writable: list[str | os.PathLike], profile: str = "narrow", readable: list[str | os.PathLike] = ()
) -> dict:
    """Confine this thread, and all it starts from now on, as the module docstring says.

    Args:
        writable: folders beneath which files may be created, written and removed (missing ones are
            skipped).
        profile: "narrow" or "wide" (module docstring).
        readable: folders the narrow profile lets it read (and not write) beside `_readable_roots`
            (the binding-object cache); missing ones are skipped. The wide profile reads everything.

    Returns:
        What holds, for the result: {"profile", "landlock_abi", "writable", "network", "signals",
        "metadata"}, the last three short phrases.

    Raises:
        SandboxUnavailable: no Landlock here, or a call failed (the message names it). If Landlock
            was applied but the seccomp filter was refused, Landlock stays in force.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown sandbox profile {profile!r}; choose one of {', '.join(PROFILES)}")
    abi = landlock_abi()
    if abi < 1:
        raise SandboxUnavailable("no Landlock on this kernel (Linux 5.13+ with landlock among its LSMs)")
    fs = 0
    for since, bits in _FS_WRITE_BY_ABI.items():
        if abi >= since:
            fs |= bits
    narrow = profile == "narrow"
    read = _READ if narrow else 0  # narrow: reads are handled too, to keep other processes' /proc out
    ioctl = _IOCTL_DEV if narrow and abi >= 5 else 0  # narrow: ioctls on the granted device files only
    file_rights = fs & ((1 << 1) | (1 << 14)) | (read & (1 << 2)) | ioctl  # WRITE_FILE | TRUNCATE | ...
    attr = _RulesetAttr(handled_access_fs=fs | read | ioctl, handled_access_net=_NET_TCP if abi >= 4 else 0,
                        scoped=_SCOPES if abi >= 6 else 0)  # fmt: skip
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)  # the fields this ABI knows
    libc = _libc()
    extra = [os.path.realpath("/proc/self")] if narrow else list(_WIDE)  # /proc/self -> /proc/PID
    folders = list(dict.fromkeys(str(Path(p).resolve()) for p in [*writable, *extra] if Path(p).is_dir()))
    devices = _writable_devices() if narrow else []
    readable = [*_readable_roots(), *(str(p) for p in readable if os.path.isdir(p))] if narrow else []
    try:
        ruleset = _call(
            libc, _NR_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
        )
    except OSError as e:
        raise SandboxUnavailable(f"landlock_create_ruleset failed: {e.strerror}") from None
    try:
        for path in readable:
            try:
                _add_rule(libc, ruleset, path, _READ if os.path.isdir(path) else _READ & (1 << 2))
            except OSError:  # a dangling link, or not a file-system object (a link to a pipe): unreadable
                pass
        for path in [*folders, *devices]:
            in_dev = ioctl if path.startswith("/dev/") else 0  # /dev/nvidia-caps/ holds device files
            _add_rule(
                libc,
                ruleset,
                path,
                ((fs & ~_MAKE_DEVICE) | read | in_dev) if os.path.isdir(path) else file_rights,
            )
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        _call(libc, _NR_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    except OSError as e:
        raise SandboxUnavailable(f"Landlock ruleset refused: {e}") from None
    finally:
        os.close(ruleset)
    seccomp = narrow and _deny_metadata_and_inet(libc)
    tcp = "tcp denied" if abi >= 4 else "allowed (kernel too old)"
    denied = (
        "chmod, chown, xattr changes, setuid/setgid modes, io_uring, System V IPC, keyrings and other "
        "processes' resource limits denied"
    )
    return {
        "profile": profile,
        "landlock_abi": abi,
        "writable": folders + devices,
        "network": "no network; no connect() to UNIX sockets" if seccomp else tcp,
        "signals": "own sandbox only" if abi >= 6 else "allowed (kernel too old)",
        "metadata": f"no capabilities; {denied}" if seccomp else "not restricted",
    }


# -- seccomp and capabilities: what Landlock has no right for ---------------------------------------
# Landlock does not govern metadata, sockets other than TCP, ioctls or io_uring, and the child may run as
# root. The narrow profile therefore drops every capability and installs a seccomp filter (x86_64
# numbers from arch/x86/entry/syscalls/syscall_64.tbl) that answers EPERM to:
#   chmod and chown (a chmod 000 on the harness's own files broke every later evaluation) and
#   extended-attribute changes (security.capability would grant capabilities);
#   io_uring (it runs socket, xattr and open operations without those system calls), acct, sethostname;
#   System V shared memory, semaphores and message queues, and kernel keyrings (they outlive it);
#   a setuid/setgid/sticky bit in mkdir, mknod, creat, or open/openat with O_CREAT or O_TMPFILE;
#   openat2 gets ENOSYS, so callers fall back to openat;
#   every socket other than a connection-oriented AF_UNIX one, and every connect(): no network, and no
#   UNIX socket by path (socketpair within the process stays);
#   the TIOCSTI and TIOCLINUX ioctls (typing into another terminal);
#   prlimit64 on any process but itself (pid 0).
_AUDIT_ARCH_X86_64 = 0xC000003E
_DENY_ALWAYS = (
    92, 93, 94, 260,  # chown, fchown, lchown, fchownat
    90, 91, 268, 452,  # chmod, fchmod, fchmodat, fchmodat2: modes are set at creation (a .so needs no +x)
    188, 189, 190, 197, 198, 199, 463, 466,  # setxattr, lsetxattr, fsetxattr, *removexattr, setxattrat, removexattrat
    425, 426, 427,  # io_uring_setup, io_uring_enter, io_uring_register
    29, 64, 68,  # shmget, semget, msgget: System V objects outlive the evaluation
    248, 249, 250,  # add_key, request_key, keyctl: kernel keyrings outlive it too
    163, 170, 171,  # acct, sethostname, setdomainname
)  # fmt: skip
_MODE_ARG = {83: 1, 258: 2, 133: 1, 259: 2, 85: 1}  # mkdir, mkdirat, mknod, mknodat, creat: the mode argument
_OPEN_ARGS = {2: (1, 2), 257: (2, 3)}  # open, openat: (flags argument, mode argument)
_CREATING = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE: the mode argument is used
_ERRNO_CALLS = {437: 38}  # openat2 -> ENOSYS: its mode sits in a struct the filter cannot read
_SOCKETPAIR, _SOCKET, _CONNECT = 53, 41, 42
# socket() and socketpair(): AF_UNIX only, of the connection-oriented types only (SOCK_STREAM 1,
# SOCK_SEQPACKET 5; the CUDA driver needs the latter: with it denied, cuInit fails with 304, measured on
# the H200 machine, 2026-11-30); no datagrams, which reach a socket by path (syslog, journald) with
# sendto alone. connect() answers ENOENT (as for a path where nothing listens; CUDA takes that for "no
# MPS daemon"), so no socket reaches ssh-agent, docker.sock or D-Bus, which Landlock ABI 7 cannot hold.
_SOCKET_FAMILY: int | None = 1  # AF_UNIX (None: any; the tests use it)
_SOCKET_TYPES: tuple[int, ...] | None = (1, 5)
_CONNECT_ERRNO: int | None = 2  # ENOENT (None: allowed)
_IOCTL, _TTY_INJECT = 16, (0x5412, 0x541C)  # ioctl; TIOCSTI, TIOCLINUX
_PRLIMIT64 = 302  # on another process (same uid: Landlock does not hold it): a file-size limit of 0 on
# the harness stopped it writing its results
_SPECIAL_BITS = 0o7000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_RET_EPERM = _RET_ERRNO | 1


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k) instructions. A jump goes to its index + 1 + offset. Each
    block either jumps to the final `deny`, returns, or falls through to the next block with the syscall
    number still in the accumulator; a syscall no block matches reaches the `allow` before `deny`."""
    LD, JEQ, JGE, JSET, RET, AND = (
        0x20,
        0x15,
        0x35,
        0x45,
        0x06,
        0x54,
    )  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K, BPF_ALU|AND|K
    DENY = "deny"  # resolved to an offset once the program's length is known
    allow = [RET, 0, 0, _RET_ALLOW]

    def arg(i: int) -> list:
        return [LD, 0, 0, 16 + 8 * i]  # low 32 bits of seccomp_data.args[i] (little-endian)

    prog: list[list] = [
        [LD, 0, 0, 4],  # seccomp_data.arch
        [JEQ, 1, 0, _AUDIT_ARCH_X86_64],
        [
            RET,
            0,
            0,
            _RET_EPERM,
        ],  # i386 calls (int 0x80) from this 64-bit process: numbers differ, none needed
        [LD, 0, 0, 0],  # seccomp_data.nr
        [JGE, DENY, 0, 0x40000000],  # the x32 ABI (nr | 0x40000000): the same calls under other numbers
    ]
    prog += [[JEQ, DENY, 0, nr] for nr in _DENY_ALWAYS]
    errno_calls = dict(_ERRNO_CALLS)
    if _CONNECT_ERRNO is not None:
        errno_calls[_CONNECT] = _CONNECT_ERRNO
    for nr, errno in errno_calls.items():
        prog += [[JEQ, 0, 1, nr], [RET, 0, 0, _RET_ERRNO | errno]]
    for nr, i in _MODE_ARG.items():
        prog += [[JEQ, 0, 3, nr], arg(i), [JSET, DENY, 0, _SPECIAL_BITS], allow]
    for nr, (flags, mode) in _OPEN_ARGS.items():
        prog += [
            [JEQ, 0, 5, nr],
            arg(flags),
            [JSET, 0, 2, _CREATING],
            arg(mode),
            [JSET, DENY, 0, _SPECIAL_BITS],
            allow,
        ]
    prog += [[JEQ, 0, 3, _PRLIMIT64], arg(0), [JEQ, 0, DENY, 0], allow]  # pid 0 (itself) only
    for nr in (_SOCKET, _SOCKETPAIR):
        family = [] if _SOCKET_FAMILY is None else [arg(0), [JEQ, 0, DENY, _SOCKET_FAMILY]]
        types = (
            []
            if _SOCKET_TYPES is None
            else [arg(1), [AND, 0, 0, 0xF]]
            + [[JEQ, len(_SOCKET_TYPES) - j, 0, t] for j, t in enumerate(_SOCKET_TYPES)]
            + [[RET, 0, 0, _RET_EPERM]]
        )
        prog += [[JEQ, 0, len(family) + len(types) + 1, nr], *family, *types, allow]
    prog += [[JEQ, 0, 1 + len(_TTY_INJECT), _IOCTL], arg(1)] + [[JEQ, DENY, 0, cmd] for cmd in _TTY_INJECT]
    prog += [allow, [RET, 0, 0, _RET_EPERM]]
    deny_at = len(prog) - 1
    to_deny = lambda i, j: deny_at - i - 1 if j == DENY else j  # noqa: E731
    out = [(c, to_deny(i, jt), to_deny(i, jf), k) for i, (c, jt, jf, k) in enumerate(prog)]
    assert all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in out)
    return out


def _drop_capabilities(libc) -> None:
    """Give up every capability (a child running as root keeps only what its uid owns): the bounding set
    first (needs CAP_SETPCAP, so only where it is held), then the ambient, effective, permitted and
    inheritable sets. With no_new_privs set, nothing it executes gets them back."""
    for cap in range(64):
        libc.prctl(
            24, cap, 0, 0, 0
        )  # PR_CAPBSET_DROP; EINVAL past the last capability, EPERM without SETPCAP
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    if libc.syscall(ctypes.c_long(126), ctypes.byref(header), data) != 0:  # capset
        raise SandboxUnavailable(f"capset failed: {os.strerror(ctypes.get_errno())}")


def _deny_metadata_and_inet(libc) -> bool:
    """Drop capabilities and install the seccomp filter above; False where the architecture has no
    numbers here (Landlock alone then)."""
    if platform.machine() != "x86_64":
        return False
    _drop_capabilities(libc)
    prog = _seccomp_program()
    arr = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), arr)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SandboxUnavailable(f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")
    return True


# -- choosing the profile on a GPU machine -----------------------------------------------------------
def _probe_main(profile: str, writable: list[str]) -> None:
    """`python -m kb_agent.evaluator.sandbox probe PROFILE DIR...`: under the profile, compile with g++ and nvcc,
    start CUDA, run a torch kernel, a Triton kernel and the profiler (what an evaluation does); prints
    "ok" when all work."""
    import subprocess
    import tempfile

    from kb_agent.evaluator.build import find_nvcc

    restrict(writable, profile)
    with tempfile.TemporaryDirectory(dir=writable[0]) as d:
        os.environ.setdefault("TMPDIR", writable[0])  # as in an evaluation child: temporary files go there
        subprocess.run(["g++", "-x", "c++", "-c", "-o", f"{d}/a.o", "-"], input="int f() { return 1; }\n",
                       text=True, check=True, capture_output=True)  # fmt: skip
        nvcc = find_nvcc()
        if nvcc:
            Path(d, "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }\n")
            subprocess.run([nvcc, "-c", "-o", f"{d}/k.o", f"{d}/k.cu"], check=True, capture_output=True)
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    x = torch.zeros(1000, device="cuda")
    _add_one[(4,)](x, x.numel(), BLOCK=256)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.relu(x)
        torch.cuda.synchronize()
    assert float(x.sum()) == 1000 and len(prof.events()) > 0
    print("ok")


def choose_profile(writable: list[str], cache_dir: str | os.PathLike, timeout_s: float = 120.0) -> str:
    """The profile an evaluation on the GPU uses: "narrow" if CUDA, Triton and the profiler work under it
    here, else "wide". Probed once per kernel, NVIDIA driver and torch version (a child process, about
    10 s) and remembered in `cache_dir`/kb-agent-sandbox-profile.json: a folder the sandboxed child cannot
    write (else a candidate could downgrade later evaluations). Call it before `restrict`."""
    import json
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "?"
    try:
        driver = Path("/sys/module/nvidia/version").read_text().strip()
    except OSError:
        driver = "?"
    key = f"{platform.release()}|{landlock_abi()}|{driver}|{torch_version}|{_PROBE_VERSION}"
    cache = Path(cache_dir) / "kb-agent-sandbox-profile.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    cmd = [sys.executable, "-m", "kb_agent.evaluator.sandbox", "probe", "narrow", *writable]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        ok = r.returncode == 0 and r.stdout.strip().endswith("ok")
    except subprocess.TimeoutExpired:
        ok = False
    known[key] = "narrow" if ok else "wide"
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(cache)
    except OSError:
        pass
    return known[key]


_PROBE_VERSION = 6  # bump when the narrow profile changes, so machines probe it again

if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "probe":
    _probe_main(sys.argv[2], sys.argv[3:])
