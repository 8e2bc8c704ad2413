"""The evaluation child's OS sandbox: Landlock, Linux's unprivileged access control (kernel 5.13+).

Strict mode's audit hook (evaluator.strict.SideEffectMonitor) sees what Python does; native code (a C++
extension, ctypes, torch.save's C++ file writer) makes its system calls directly. Landlock holds those
too, for the calling thread and every thread and process it starts afterwards, and it cannot be lifted.
`restrict()` runs in the child before torch is imported (so before any thread exists) and allows:

* file creation, writes, truncation, renames and removal only beneath the given folders (the
  evaluation's work directory, with the candidate's HOME and TMPDIR in it, and the build cache), /dev
  and /proc (the CUDA driver needs both); reading and executing stay allowed;
* no TCP connect or bind (Landlock ABI 4+, Linux 6.7);
* no signals to processes outside the sandbox, such as the harness, and no abstract UNIX sockets
  (ABI 6+, Linux 6.12).

A denied call fails with EACCES (files) or EACCES/EPERM (network, signals). Constants and struct
layouts are those of include/uapi/linux/landlock.h; see https://docs.kernel.org/userspace-api/landlock.html.
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


# The GPU's device files are opened for writing, and the CUDA driver writes under /proc as it starts
# (measured on the H200 machine: with /dev alone, cuInit fails with cudaErrorOperatingSystem, 304).
# Other processes' /proc/PID/mem stays out of reach: Landlock denies ptrace access outside the sandbox.
_ALWAYS = ("/dev", "/proc")


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


def restrict(writable: list[str | os.PathLike]) -> dict:
    """Confine this thread, and all it starts from now on, as the module docstring says.

    Args:
        writable: folders beneath which files may be created, written and removed (missing ones are
            skipped); /dev and /proc are always added.

    Returns:
        What holds, for the result: {"landlock_abi": int, "writable": [str], "network": "tcp denied" or
        "allowed (kernel too old)", "signals": "own sandbox only" or "allowed (kernel too old)"}.

    Raises:
        SandboxUnavailable: no Landlock here, or a call failed (the message names it); nothing is
            restricted then.
    """
    abi = landlock_abi()
    if abi < 1:
        raise SandboxUnavailable("no Landlock on this kernel (Linux 5.13+ with landlock among its LSMs)")
    fs = 0
    for since, bits in _FS_WRITE_BY_ABI.items():
        if abi >= since:
            fs |= bits
    attr = _RulesetAttr(handled_access_fs=fs, handled_access_net=_NET_TCP if abi >= 4 else 0,
                        scoped=_SCOPES if abi >= 6 else 0)  # fmt: skip
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)  # the fields this ABI knows
    libc = _libc()
    folders = list(dict.fromkeys(str(Path(p).resolve()) for p in [*writable, *_ALWAYS] if Path(p).is_dir()))
    try:
        ruleset = _call(libc, _NR_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    except OSError as e:
        raise SandboxUnavailable(f"landlock_create_ruleset failed: {e.strerror}") from None
    try:
        for folder in folders:
            fd = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(allowed_access=fs, parent_fd=fd)
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
    return {
        "landlock_abi": abi,
        "writable": folders,
        "network": "tcp denied" if abi >= 4 else "allowed (kernel too old)",
        "signals": "own sandbox only" if abi >= 6 else "allowed (kernel too old)",
    }
