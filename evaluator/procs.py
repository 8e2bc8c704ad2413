"""Keeping an evaluation's processes together: everything a candidate starts ends with the evaluation.

The evaluation child is started in a session of its own, and the parent kills that session and process
group. A process that leaves both (`setsid`) and loses its parent (a double fork) would be reparented to
init and outlive the evaluation, keeping GPU memory and compute. So on Linux the child splits in two as
it starts (`supervise`): the parent half runs no candidate code and is a child subreaper
(PR_SET_CHILD_SUBREAPER, prctl(2)): every orphan below it is reparented to it, not to init. When the
evaluation half exits, it kills every process still below it and exits as the evaluation half did.
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
    """{pid: (ppid, process group, session)} of every live (non-zombie) process, from /proc/PID/stat."""
    table = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
            if fields[0] != "Z":
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


def group_rss_bytes(leader: int) -> int:
    """Resident memory of `group_members(leader)`, bytes (/proc/PID/statm)."""
    total = 0
    for pid in group_members(leader):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG), so a SIGKILLed
    harness leaves no child looping in candidate code past every limit (the limits are the parent's to
    enforce). Exits at once if the parent is already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # died before the line above took effect
        os._exit(1)


def kill_descendants(deadline_s: float = 5.0) -> int:
    """SIGKILL every process below this one, with the whole process group of each (other than this
    one's own group), and reap them, until none is left or `deadline_s` passes; returns how many were
    killed. Killing a group is one call for all its members, so a chain of processes that each fork and
    exit (faster than /proc can be read) dies with it as long as it stays in one group."""
    killed: set[int] = set()
    own_group = os.getpgrp()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        table = process_table()
        below = descendants(os.getpid(), table)
        for pgid in {table[p][1] for p in below if p in table} - {own_group}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        try:  # reap: killed children, and the orphans of killed ones (reparented here)
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            if not below:
                break
        if not below:
            break
        time.sleep(0.01)
    return len(killed)


def supervise(close_fds: tuple[int, ...] = ()) -> None:
    """Split this process (Linux; see the module docstring). Returns only in the evaluation half, whose
    parent is the supervising half; that half closes `close_fds` (the result channel's descriptors:
    the parent reads until every writer has closed it), waits, kills what is left below it, writes
    `SWEEP_LINE` to stderr if it killed any, and exits as the evaluation half did. Call it before
    anything starts a thread. Does nothing where PR_SET_CHILD_SUBREAPER is not available."""
    if not sys.platform.startswith("linux"):
        return
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return
    me = os.getpid()
    child = os.fork()
    if child == 0:
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
    if n:
        os.write(2, ("\n" + SWEEP_LINE.format(n=n) + "\n").encode())
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else 1)
