"""Keeping an evaluation's processes together: everything a candidate starts ends with the evaluation.

The evaluation child is started in a session of its own, and the parent kills that session and process
group. A process that leaves both (`setsid`) and loses its parent (a double fork) would be reparented to
init and outlive the evaluation, keeping GPU memory and compute. So on Linux the child splits in two as
it starts (`supervise`): the parent half runs no candidate code and is a child subreaper
(PR_SET_CHILD_SUBREAPER, prctl(2)): every orphan below it is reparented to it, not to init. When the
evaluation half exits, it kills every process still below it, until the kernel says it has no child
left, and exits as the evaluation half did.
Under strict mode's sandbox (Landlock scopes signals, Linux 6.12+) the candidate cannot signal it.

Process tables are read from /proc (Linux); elsewhere they are empty and `supervise` does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER, _PR_SET_PDEATHSIG = 36, 1
SWEEP_LINE = "kb-agent: killed {n} process(es) the evaluation left running"  # on stderr, by `supervise`


def process_table() -> dict[int, tuple[int, int, int]]:
    """{pid: (ppid, process group, session)} of every live process (not a zombie, unless threads of it
    still run), from /proc/PID/stat."""
    table = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
            # a zombie main thread whose other threads still run (it called pthread_exit) is alive
            if fields[0] != "Z" or len(os.listdir(f"/proc/{entry}/task")) > 1:
                table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def descendants(pid: int, table: dict[int, tuple[int, int, int]] | None = None) -> list[int]:
    """Pids of the live processes below `pid` (children, their children, ...)."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for p, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(p)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def group_members(leader: int) -> list[int]:
    """Pids of the live processes in process group `leader`, in the session it leads, or below it: all
    that the evaluation child (a session leader) started, those that left its session included."""
    table = process_table()
    members = {p for p, (_, pgrp, sid) in table.items() if leader in (pgrp, sid)}
    return sorted(members | set(descendants(leader, table)))


def _resident_pages(pid: int) -> int:
    """Resident pages of process `pid` (/proc/PID/statm); read through a live thread's entry where the
    main thread has exited (its own shows none)."""
    pages = 0
    for path in [f"/proc/{pid}/statm"] + [
        f"/proc/{pid}/task/{t}/statm" for t in listdir(f"/proc/{pid}/task")
    ]:
        try:
            pages = max(pages, int(Path(path).read_text().split()[1]))
        except (OSError, ValueError, IndexError):
            continue
        if pages:
            break
    return pages


def listdir(path: str) -> list[str]:
    """The sorted entries of folder `path`; none where it cannot be read."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def machine_memory_bytes() -> int | None:
    """This machine's physical memory, bytes (MemTotal of /proc/meminfo); None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def group_rss_bytes(leader: int) -> int:
    """Resident memory of `group_members(leader)`, bytes (/proc/PID/statm)."""
    return sum(_resident_pages(pid) for pid in group_members(leader)) * os.sysconf("SC_PAGE_SIZE")


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG), so a SIGKILLed
    harness leaves no child looping in candidate code past every limit (the limits are the parent's to
    enforce). Exits at once if the parent is already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # died before the line above took effect
        os._exit(1)


def _children() -> list[int]:
    """This process's children, from the kernel's own list (/proc/self/task/TID/children): one short
    read, where a scan of /proc misses a process that forks and exits while it runs."""
    out = []
    for task in os.listdir("/proc/self/task"):
        try:
            out += [int(p) for p in Path(f"/proc/self/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            pass
    return out


def _kill(pid: int, killed: set[int]) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        killed.add(pid)
    except (ProcessLookupError, PermissionError):
        pass


def _reap() -> bool:
    """Reap every child that has exited; False when this process has no child at all, alive or not
    (then nothing is left below it)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        return False
    return True


def kill_descendants(deadline_s: float = 10.0) -> int:
    """SIGKILL every process below this one (a subreaper: orphans below it are reparented to it) and
    reap them, until it has no child left, alive or zombie, or `deadline_s` passes; returns how many
    were killed. A chain of processes that each fork and exit lives shorter than a scan of /proc takes,
    so the children are also read from the kernel's list, and every process group seen is killed whole
    (one call for all its members) at each round."""
    killed: set[int] = set()
    groups: set[int] = set()
    own_group = os.getpgrp()
    end = time.monotonic() + deadline_s
    while True:
        before = len(killed)
        if not _reap():  # reaped first: a zombie is not a process left running (killing one succeeds)
            break
        for pid in _children():
            _kill(pid, killed)
        table = process_table()
        below = descendants(os.getpid(), table)
        groups |= {table[p][1] for p in below} - {own_group}
        for pgid in list(groups):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                groups.discard(pgid)
            except PermissionError:
                pass
        for pid in below:
            _kill(pid, killed)
        if not _reap():  # killed children, and the orphans of killed ones (reparented here)
            break
        if time.monotonic() > end:
            break
        if len(killed) == before:  # only the unkillable (uninterruptible sleep) are left: do not spin
            time.sleep(0.005)
    return len(killed)


def supervise(close_fds: tuple[int, ...] = (), report_fd: int | None = None) -> None:
    """Split this process (Linux; see the module docstring). Returns only in the evaluation half, whose
    parent is the supervising half; that half closes `close_fds` (the result channel's descriptors:
    the parent reads until every writer has closed it), waits, kills what is left below it, writes how
    many to `report_fd` (a pipe to the parent that the evaluation half closes at once: the candidate
    shares stderr, and can move its write position) and `SWEEP_LINE` to stderr if any, and exits as
    the evaluation half did. Call it before anything starts a thread. Does nothing where
    PR_SET_CHILD_SUBREAPER is not available."""
    if not sys.platform.startswith("linux") or (
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
    ):
        if report_fd is not None:
            os.close(report_fd)
        return
    me = os.getpid()
    child = os.fork()
    if child == 0:
        if report_fd is not None:
            os.close(report_fd)
        die_with_parent(me)
        os.setpgid(0, 0)  # a group of its own, which `kill_descendants` can kill at once
        return
    for fd in close_fds:
        os.close(fd)

    class _ParentDied(Exception):
        pass

    def _on_parent_death(signum, frame):
        raise _ParentDied

    # when the harness dies (even by SIGKILL), sweep before exiting: SIGTERM, not SIGKILL, from now on
    signal.signal(signal.SIGTERM, _on_parent_death)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    status = None
    try:
        while status is None:
            try:
                pid, st = os.waitpid(-1, 0)  # reaps orphans reparented here as well
            except ChildProcessError:
                break
            if pid == child:
                status = st
    except _ParentDied:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    n = kill_descendants()
    if report_fd is not None:
        os.write(report_fd, str(n).encode())
        os.close(report_fd)
    if n:
        os.write(2, ("\n" + SWEEP_LINE.format(n=n) + "\n").encode())
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else 1)
