"""The evaluation child's OS sandbox: Landlock (Linux 5.13+) and a seccomp filter, both unprivileged.

Strict mode's audit hook (evaluator.strict.SideEffectMonitor) sees what Python does; native code (a C++
extension, ctypes, torch.save's C++ file writer) makes its system calls directly. The kernel holds those
too, for the calling thread and every thread and process it starts afterwards, and cannot be asked to
lift it. `restrict()` runs in the child before torch is imported (so before any thread exists).

Profile "narrow" (the default):
* files are created, written, truncated, renamed or removed only beneath the given folders (the
  evaluation's work directory, holding the candidate's HOME and TMPDIR, and the build cache), the
  child's own /proc/PID, and the device files of `_writable_devices` (no /dev/shm: files there outlive
  the evaluation); reading and executing stay allowed;
* no TCP connect or bind (Landlock ABI 4+, Linux 6.7); no signals to processes outside the sandbox,
  such as the harness, and no abstract UNIX sockets (ABI 6+, Linux 6.12);
* seccomp (x86_64): no chown, no extended-attribute changes, no setuid/setgid/sticky chmod, no IP or
  packet sockets (UDP included), none of the i386 or x32 system calls.

Profile "wide": Landlock as above but with all of /dev and /proc writable, and no seccomp filter. It is
the configuration measured to let CUDA start on the H200 machine (2026-11-30); `choose_profile` uses it
only where a probe finds that CUDA does not start under "narrow".

A denied call fails with EACCES or EPERM. Landlock's constants and struct layouts are those of
include/uapi/linux/landlock.h (https://docs.kernel.org/userspace-api/landlock.html); seccomp's of
include/uapi/linux/seccomp.h and linux/filter.h. Still open: chmod without special bits and timestamps
on files the user owns, and connecting to UNIX sockets by path.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

# syscall numbers: the same in the unified table of x86_64, aarch64 and the other 64-bit Linux ports
_NR_CREATE_RULESET, _NR_ADD_RULE, _NR_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
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
        return _call(_libc(), _NR_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def _writable_devices() -> list[str]:
    """The device files a GPU evaluation writes: the null-like ones and NVIDIA's (no /dev/shm: files
    there outlive the evaluation, a channel to the next one)."""
    found = [f"/dev/{n}" for n in ("null", "zero", "full", "random", "urandom")]
    try:
        found += sorted(f"/dev/{n}" for n in os.listdir("/dev") if n.startswith("nvidia"))
    except OSError:
        pass
    return [p for p in found if os.path.exists(p)]


def restrict(writable: list[str | os.PathLike], profile: str = "narrow") -> dict:
    """Confine this thread, and all it starts from now on, as the module docstring says.

    Args:
        writable: folders beneath which files may be created, written and removed (missing ones are
            skipped).
        profile: "narrow" or "wide" (module docstring).

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
    file_rights = fs & ((1 << 1) | (1 << 14))  # WRITE_FILE | TRUNCATE: what a rule on a file may allow
    attr = _RulesetAttr(handled_access_fs=fs, handled_access_net=_NET_TCP if abi >= 4 else 0,
                        scoped=_SCOPES if abi >= 6 else 0)  # fmt: skip
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)  # the fields this ABI knows
    libc = _libc()
    narrow = profile == "narrow"
    extra = [os.path.realpath("/proc/self")] if narrow else list(_WIDE)  # /proc/self -> /proc/PID
    folders = list(dict.fromkeys(str(Path(p).resolve()) for p in [*writable, *extra] if Path(p).is_dir()))
    devices = _writable_devices() if narrow else []
    try:
        ruleset = _call(libc, _NR_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    except OSError as e:
        raise SandboxUnavailable(f"landlock_create_ruleset failed: {e.strerror}") from None
    try:
        for path in [*folders, *devices]:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rights = fs if os.path.isdir(path) else file_rights
                rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
                _call(libc, _NR_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                      ctypes.byref(rule), ctypes.c_uint32(0))  # fmt: skip
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        _call(libc, _NR_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    except OSError as e:
        raise SandboxUnavailable(f"Landlock ruleset refused: {e}") from None
    finally:
        os.close(ruleset)
    seccomp = narrow and _deny_metadata_and_inet(libc)
    tcp = "tcp denied" if abi >= 4 else "allowed (kernel too old)"
    return {
        "profile": profile,
        "landlock_abi": abi,
        "writable": folders + devices,
        "network": "no IP sockets" if seccomp else tcp,
        "signals": "own sandbox only" if abi >= 6 else "allowed (kernel too old)",
        "metadata": "chown, xattr changes and setuid/setgid/sticky chmod denied" if seccomp else "not restricted",
    }


# -- seccomp: what Landlock has no right for -------------------------------------------------------
# Landlock does not govern chmod, chown or extended attributes, so a root child could mark any file
# setuid or give it capabilities (security.capability); nor UDP. A seccomp filter (x86_64 numbers, from
# arch/x86/entry/syscalls/syscall_64.tbl) answers EPERM to: the chown family, setting or removing
# extended attributes, chmod with a setuid/setgid/sticky bit (builds still chmod +x their outputs), and
# creating IPv4/IPv6/packet sockets (nothing in an evaluation needs one; UNIX sockets stay).
_AUDIT_ARCH_X86_64 = 0xC000003E
_DENY_ALWAYS = (92, 93, 94, 260, 188, 189, 190, 197, 198, 199, 463, 466)  # chown..fchownat, *setxattr*, *removexattr*
_CHMOD_MODE_ARG = {90: 1, 91: 1, 268: 2, 452: 2}  # chmod, fchmod, fchmodat, fchmodat2: which argument is the mode
_SOCKET, _IP_FAMILIES = 41, (2, 10, 17)  # socket(); AF_INET, AF_INET6, AF_PACKET
_SPECIAL_BITS = 0o7000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | 1


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k) instructions. A jump goes to its index + 1 + offset; every
    denial jumps to the final `deny`, and a syscall no check matches reaches the `allow` before it."""
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
    DENY = "deny"  # resolved to an offset once the program's length is known
    prog: list[list] = [
        [LD, 0, 0, 4],  # seccomp_data.arch
        [JEQ, 1, 0, _AUDIT_ARCH_X86_64],
        [RET, 0, 0, _RET_EPERM],  # i386 calls (int 0x80) from this 64-bit process: numbers differ, none needed
        [LD, 0, 0, 0],  # seccomp_data.nr
        [JGE, DENY, 0, 0x40000000],  # the x32 ABI (nr | 0x40000000): the same calls under other numbers
    ]
    for nr in _DENY_ALWAYS:
        prog.append([JEQ, DENY, 0, nr])
    for nr, arg in _CHMOD_MODE_ARG.items():  # each branch returns, so the accumulator is nr after it
        prog += [[JEQ, 0, 3, nr], [LD, 0, 0, 16 + 8 * arg], [JSET, DENY, 0, _SPECIAL_BITS], [RET, 0, 0, _RET_ALLOW]]
    # last: after it the accumulator holds the socket's domain, and only `allow` follows
    prog += [[JEQ, 0, 1 + len(_IP_FAMILIES), _SOCKET], [LD, 0, 0, 16]]
    prog += [[JEQ, DENY, 0, fam] for fam in _IP_FAMILIES]
    prog += [[RET, 0, 0, _RET_ALLOW], [RET, 0, 0, _RET_EPERM]]
    deny_at = len(prog) - 1
    return [(c, deny_at - i - 1 if jt == DENY else jt, jf, k) for i, (c, jt, jf, k) in enumerate(prog)]


def _deny_metadata_and_inet(libc) -> bool:
    """Install the seccomp filter above; False where the architecture has no numbers here."""
    if platform.machine() != "x86_64":
        return False
    prog = _seccomp_program()
    arr = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), arr)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SandboxUnavailable(f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")
    return True


# -- choosing the profile on a GPU machine -----------------------------------------------------------
def _probe_main(profile: str, writable: list[str]) -> None:
    """`python -m evaluator.sandbox probe PROFILE DIR...`: under the profile, start CUDA, run a torch
    kernel, a Triton kernel and the profiler (what an evaluation does); prints "ok" when all work."""
    restrict(writable, profile)
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
    10 s) and remembered in `cache_dir`/sandbox-profile.json. Call it before `restrict`."""
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
    cache = Path(cache_dir) / "sandbox-profile.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    cmd = [sys.executable, "-m", "evaluator.sandbox", "probe", "narrow", *writable]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        ok = r.returncode == 0 and r.stdout.strip().endswith("ok")
    except subprocess.TimeoutExpired:
        ok = False
    known[key] = "narrow" if ok else "wide"
    try:
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(cache)
    except OSError:
        pass
    return known[key]


_PROBE_VERSION = 1  # bump when the narrow profile changes, so machines probe it again

if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "probe":
    _probe_main(sys.argv[2], sys.argv[3:])
