"""The fork server ("zygote"): evaluation children forked from a warm interpreter instead of spawned.

Spawning `python -m kb_agent.evaluator.worker` costs an interpreter start and the imports of torch,
triton and the evaluator in every evaluation (3.4-4.2 s plus 4-5 s on the H200, issue 13). A zygote is
a long-lived process that the harness starts once per (Python executable, device kind, environment):
it imports those modules, never initialises CUDA, never reads a job or a candidate, and forks one child
per evaluation on request. The child then does exactly what a spawned worker does (`worker.main`, the
same argv): its own session and process group, the work directory as cwd, the evaluation's environment,
die_with_parent, `procs.supervise`, strict mode's sandbox (`worker.confine`, applied in the child),
faulthandler, the signed channel, the job. Each child initialises CUDA itself, after the fork, so each
gets its own CUDA context. `EvalSettings(fork_server=False)` or KB_FORK_SERVER=0 spawns every child;
where the fork path cannot serve (not Linux, a zygote that cannot fork safely or died), the child is
spawned, and `EvalResult.child_start` says which way it started and why.

    harness (runner.run_child)             zygote (this module, `python -m`)      child (worker.main)
    fork_child(env, cwd, job, fds) ---->   fork() ----------------------------->  setsid, chdir, env, ...
      <- ForkedChild(pid, pidfd) --------  {"event": "forked", pid} + pidfd
      ForkedChild.wait()/poll() <--------  {"event": "exited", pid, returncode}    (reaped by the zygote)

Protocol: one AF_UNIX SOCK_SEQPACKET socketpair per zygote, one JSON object per message; descriptors
pass with SCM_RIGHTS. Requests carry the child's channel write end, the key pipe's read end, the sweep
pipe's write end and the stdout/stderr files; the zygote closes its copies as soon as it has forked (the
harness reads the channel until every writer has closed it). Several harness threads may fork at once
(EvalPool): sends are serialised by a lock, replies matched by request id; one reader thread per zygote
receives replies and exit statuses. That thread also starts the zygote and lives as long as it:
PR_SET_PDEATHSIG fires when the *thread* that started a process ends.

Safety checks, before the zygote says it is ready and again before every fork (else the request is
refused and the evaluation spawned): exactly one thread (/proc/self/task; fork copies only the calling
thread, so a lock another thread held would stay held in the child, and Landlock's restrict_self confines
the calling thread and what it starts afterwards: with one thread, the child's sandbox covers every
thread it will ever have); CUDA untouched (`torch.cuda.is_initialized()` is False and, where libcuda is
mapped at all, `cuDeviceGetCount` answers CUDA_ERROR_NOT_INITIALIZED, so cuInit never ran). numpy's
OpenBLAS starts a thread pool at import: the zygote stops it with OpenBLAS's own `blas_thread_shutdown_`
(what OpenBLAS's fork handler runs before every fork anyway); children restart it on first use.

Threat analysis (a candidate in a forked child, same uid as the zygote and the harness):
* Secrets: the zygote is started with the child's scrubbed environment (`runner.child_env`: nothing
  whose name looks like a credential), so neither its /proc/PID/environ nor its memory, which every
  child inherits copy-on-write, holds one. The per-evaluation HMAC key never passes through it: the
  harness writes it into the key pipe after the child exists. What a child can read of the zygote's
  memory: imported modules, and the scrubbed environments and paths of earlier requests.
* Changing the zygote or later children through memory: impossible; the child's pages are copy-on-write
  copies, its writes reach neither the zygote nor any sibling, and every child is forked from the
  zygote's unchanged state, never from an earlier child.
* Reaching the zygote: the child closes the zygote's socket and every descriptor not passed to it
  before anything of the evaluation runs; the socketpair has no name, so nothing can connect to it.
  What is left is what a process of the same uid can do to any other: signals (kill, stop) and ptrace
  (also /proc/PID/mem, process_vm_writev, pidfd_getfd). Strict mode's sandbox covers these: Landlock
  denies ptrace of any process outside the child's own domain (every ABI), scopes signals to it (ABI 6,
  Linux 6.12+), and the narrow profile hides other processes' /proc entries; Yama's ptrace_scope 1 (a
  common default) also allows ptrace of descendants only, which the zygote is not. Without the sandbox
  (parity mode, `sandbox=False`, older kernels) a candidate can signal or ptrace any process of its uid,
  the harness included, exactly as with spawned children: the zygote adds no power.
* A zygote killed by a candidate: its in-flight children end with it (PR_SET_PDEATHSIG: the supervising
  half sweeps its evaluation, as when the harness dies) and are reported as killed, their stderr saying
  why; the next evaluation starts a new zygote. A stopped (SIGSTOP) or silent zygote: a fork request
  unanswered within `FORK_REPLY_TIMEOUT_S` kills it, and that evaluation is spawned on fresh pipes.
* The zygote dies with the harness (PR_SET_PDEATHSIG, and a parent pid check after setting it), and
  exits when its socket closes.
* Pids: the zygote reaps a child as it exits and reports its status; the harness holds a pidfd of the
  child, received with the reply, so it knows when the process has ended even when the zygote is gone.

What differs from a spawned child: more modules are already imported (`PRELOAD`); /proc/self/environ
shows the zygote's initial (scrubbed) environment, while os.environ is the evaluation's; the supervising
half's RSS includes the zygote's memory that it shares copy-on-write (`ForkedChild.inherited_bytes`, which
`runner.run_child` adds to the memory limit so the candidate's budget is what it was). Import-time copies
of per-evaluation paths (HOME, TMPDIR, the cwd) are recomputed in the child (`_reset_cached_state`); a
test scans every module for the zygote's own folder name to catch new ones.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, NoReturn

log = logging.getLogger(__name__)

FORK_SERVER_ENV = "KB_FORK_SERVER"  # "0", "false", "no" or "off": spawn every child
FORK_REPLY_TIMEOUT_S = 10.0  # a fork takes milliseconds; a zygote this late is stopped or stuck
MAX_SERVERS = 3  # zygotes kept at once (one per key); the least recently used idle one goes first
# child_env variables that differ between evaluations, or appear in the harness's environment as it
# runs, and are read only at run time, after the child's environment is in place (the import-time
# copies of HOME, TMPDIR and TORCHINDUCTOR_CACHE_DIR are recomputed by `_reset_cached_state`): they are
# not part of a zygote's key. torch sets TORCHINDUCTOR_CACHE_DIR in os.environ the first time anything
# imports torch._dynamo (the harness too); PYTEST_CURRENT_TEST changes per test.
RUNTIME_ONLY = frozenset({"HOME", "TMPDIR", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                          "PYTEST_CURRENT_TEST"})  # fmt: skip
# What a child would import anyway, in order (`torch` must import, the rest where installed): the
# evaluation's own modules and what its stages import (the profiler and strict mode load torch._dynamo).
# Importing them runs no candidate code and starts no CUDA. Not torch.utils.cpp_extension: at import it
# asks torch.cuda.is_available() when it finds CUDA_HOME, which runs cuInit; on the H200 that started a
# driver thread (`cuda00001400006`) in the warm worker, and every evaluation was spawned instead
# (2026-12-01). The child imports it as its build begins. `test_zygote` checks that no module here asks.
PRELOAD = (
    "numpy",
    "torch",
    "triton",
    "triton.language",
    "torch._dynamo",
    "torch.profiler",
    "torch.utils.flop_counter",
    "torch.utils._python_dispatch",
    "kb_agent.evaluator.worker",
    "kb_agent.evaluator.context",
    "kb_agent.evaluator.build",
    "kb_agent.evaluator.compare",
    "kb_agent.evaluator.diagnosis",
    "kb_agent.evaluator.hardware",
    "kb_agent.evaluator.kernel_probe",
    "kb_agent.evaluator.profile",
    "kb_agent.evaluator.sandbox",
    "kb_agent.evaluator.strict",
    "kb_agent.evaluator.thresholds",
    "kb_agent.evaluator.timing",
    "kb_agent.evaluator.stages.build",
    "kb_agent.evaluator.stages.correctness",
    "kb_agent.evaluator.stages.strict_trials",
    "kb_agent.evaluator.stages.timing",
    "kb_agent.evaluator.stages.problem_check",
    "kb_agent.evaluator.stages.baseline",
)
_CUDA_ERROR_NOT_INITIALIZED = 3


class ForkUnavailable(Exception):
    """The fork path cannot start this child; the message says why (recorded as the spawn's reason)."""


class _Gone(ForkUnavailable):
    """The zygote had died before the request was sent: another one may fork it."""


# ------------------------------------------------------------------------------------ harness side
def unavailable(fork_server: bool = True) -> str | None:
    """Why children are spawned rather than forked here, or None when the fork path may be tried:
    turned off (`fork_server=False`, `KB_FORK_SERVER=0`), or a platform without Linux's pidfds and
    SCM_RIGHTS in Python (Linux 5.3+, Python 3.9+)."""
    if not fork_server:
        return "turned off (EvalSettings(fork_server=False))"
    if os.environ.get(FORK_SERVER_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return f"turned off ({FORK_SERVER_ENV}={os.environ[FORK_SERVER_ENV]})"
    if not sys.platform.startswith("linux"):
        return f"no fork server on {sys.platform} (Linux only)"
    if not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")):
        return "no fork server without os.pidfd_open and socket.send_fds (Python 3.9+)"
    return _pidfd_missing()


_PIDFD_MISSING: list[str | None] = []


def _pidfd_missing() -> str | None:
    if not _PIDFD_MISSING:
        try:
            os.close(os.pidfd_open(os.getpid()))
            _PIDFD_MISSING.append(None)
        except OSError as e:
            _PIDFD_MISSING.append(f"no fork server: pidfd_open failed ({e.strerror}; needs Linux 5.3+)")
    return _PIDFD_MISSING[0]


def server_key(env: dict[str, str], device: str) -> tuple:
    """What decides which zygote may fork a child: the Python executable, the device kind ("cpu" or
    "cuda"; the CPU's child_env sets TRITON_INTERPRET=1, which triton reads as kernels are defined) and
    the environment but `RUNTIME_ONLY`."""
    kind = "cpu" if device == "cpu" else "cuda"
    return (sys.executable, kind, tuple(sorted((k, v) for k, v in env.items() if k not in RUNTIME_ONLY)))


def fork_child(
    env: dict[str, str], cwd: str, job_path: str, fds: tuple[int, ...], device: str, boot_timeout_s: float
) -> ForkedChild:
    """Fork an evaluation child from the zygote for (`env`, `device`), starting that zygote first when
    there is none (waiting up to `boot_timeout_s` seconds for its imports).

    Args:
        env: the child's whole environment (`runner.child_env`).
        cwd: its work directory.
        job_path: the job file, passed to `worker.main` as a spawned worker gets it.
        fds: (channel write end, key read end, sweep write end, stdout file, stderr file), the harness's
            descriptors; the zygote receives copies, the caller keeps and closes its own.
        device: "cpu", "cuda" or "cuda:N" (the zygote's device kind).

    Returns:
        A Popen-like handle on the child (not the harness's own child: the zygote is its parent).

    Raises:
        ForkUnavailable: no zygote could fork it; the message says why. The request may have reached
            the zygote, so the caller spawns the child on fresh descriptors.
    """
    key = server_key(env, device)
    for attempt in (1, 2):
        server = _server_for(key, env, boot_timeout_s)
        try:
            return server.fork(env, cwd, job_path, fds)
        except _Gone:  # it died since it was looked up (a candidate killed it?), before our request
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


_SERVERS: dict[tuple, ForkServer] = {}
_UNUSABLE: dict[tuple, str] = {}  # keys whose zygote could not start safely, and why: spawned from then on
_REGISTRY = threading.Lock()


def _server_for(key: tuple, env: dict[str, str], boot_timeout_s: float) -> ForkServer:
    with _REGISTRY:
        if key in _UNUSABLE:
            raise ForkUnavailable(_UNUSABLE[key])
        server = _SERVERS.get(key)
        if server is None or server.gone is not None:
            server = _SERVERS[key] = ForkServer(key, env)
            _evict()
        server.last_used = time.monotonic()
    if not server.ready.wait(boot_timeout_s):
        server.stop()
        return _unusable(key, server, f"the warm worker did not start within {boot_timeout_s:g} s")
    if server.info is None:  # it said it cannot fork safely, or died while importing
        return _unusable(key, server, server.failure or server.gone or "the warm worker did not start")
    if server.gone is not None:
        raise _Gone(server.gone)
    return server


def _unusable(key: tuple, server: ForkServer, reason: str) -> NoReturn:
    with _REGISTRY:
        _UNUSABLE[key] = reason
        if _SERVERS.get(key) is server:
            del _SERVERS[key]
    log.warning("evaluation children will be spawned, not forked: %s", reason)
    raise ForkUnavailable(reason)


def _evict() -> None:
    """Retire the least recently used zygotes past `MAX_SERVERS` (under `_REGISTRY`)."""
    while len(_SERVERS) > MAX_SERVERS:
        key = min(_SERVERS, key=lambda k: _SERVERS[k].last_used)
        _SERVERS.pop(key).retire()


def stop_all() -> None:
    """Stop every zygote of this process (each kills the children it forked that still run)."""
    with _REGISTRY:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
        _UNUSABLE.clear()
    for server in servers:
        server.stop()


def _forget_after_fork() -> None:  # a forked copy of the harness must not share its zygotes' sockets
    _SERVERS.clear()
    _UNUSABLE.clear()
    global _REGISTRY
    _REGISTRY = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class ForkedChild:
    """A Popen-like handle on a child the zygote forked: `pid`, `returncode`, `poll()`, `wait(timeout)`
    (raises subprocess.TimeoutExpired), `send_signal`, `kill`. Its parent, the zygote, reaps it and sends
    the exit status; the harness's pidfd of it tells when it has ended should the zygote be gone first
    (`lost` then says why, and `returncode` is -SIGKILL: the zygote's death ended it).

    `inherited_bytes`: the zygote's anonymous resident memory at the fork, which the child's supervising
    half counts in its RSS without using more memory (copy-on-write)."""

    def __init__(self, pid: int, pidfd: int, inherited_bytes: int):
        self.pid = pid
        self.args = ["kb_agent.evaluator.zygote", "fork", str(pid)]  # for TimeoutExpired's message
        self.returncode: int | None = None
        self.inherited_bytes = inherited_bytes
        self.lost: str | None = None
        self._pidfd = pidfd
        self._changed = threading.Event()
        weakref.finalize(self, os.close, pidfd)

    def _exited(self, returncode: int) -> None:
        self.returncode = returncode
        self._changed.set()

    def _lose(self, reason: str) -> None:
        self.lost = reason
        self._changed.set()

    def _ended(self, timeout: float = 0.0) -> bool:
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(ready)

    def poll(self) -> int | None:
        if self.returncode is None and self.lost is not None and self._ended():
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.5 if end is None else min(0.5, end - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if self.lost is not None:
                self._ended(left)
            else:
                self._changed.wait(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkServer:
    """The harness's side of one zygote: starts it (from its own reader thread), forks children on it,
    and hands their exit statuses to their `ForkedChild`. `ready` is set once the zygote has said
    whether it can fork (`info`, its ready message) or cannot (`failure`), or has died (`gone`)."""

    def __init__(self, key: tuple, env: dict[str, str]):
        self.key = key
        self.env = {k: v for k, v in env.items() if k not in RUNTIME_ONLY}
        self.ready = threading.Event()
        self.info: dict | None = None
        self.failure: str | None = None
        self.gone: str | None = None  # why it can no longer fork (it died, or was stopped)
        self.last_used = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self._retiring = False
        self._lock = threading.Lock()
        self._send = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, list] = {}  # request id -> [Event, ForkedChild or ForkUnavailable]
        self._children: dict[int, ForkedChild] = {}
        self._home: str | None = None
        self._log = None
        threading.Thread(target=self._run, name="kb-zygote-reader", daemon=True).start()

    # -- the reader thread ------------------------------------------------------------------------
    def _run(self) -> None:
        reason = "the warm worker exited"
        try:
            self._start()
            reason = self._read()
        except Exception as e:  # noqa: BLE001 - whatever went wrong, fall back to spawning
            reason = f"the warm worker failed: {type(e).__name__}: {e}"
        finally:
            self._end(reason)

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # its HOME, TMPDIR and cwd while it imports: a folder of its own, empty like a work directory's,
        # removed once it is ready (the children recompute what the imports derived from them)
        self._home = tempfile.mkdtemp(prefix="kb-zygote-")
        env = {**self.env, "HOME": self._home, "TMPDIR": self._home}
        self._log = tempfile.TemporaryFile()  # its own stderr: what it printed, should it fail
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kb_agent.evaluator.zygote", str(os.getpid()), str(theirs.fileno())],
                cwd=self._home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # no terminal's Ctrl-C; it dies with the harness instead
            )
        finally:
            theirs.close()
        self.sock = ours

    def _read(self) -> str:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            except OSError as e:
                return f"the warm worker's socket failed: {e}"
            if not data:
                return self._death()
            for fd in fds:
                os.set_inheritable(fd, False)
            msg = json.loads(data)
            event = msg.get("event")
            if event == "ready":
                self.info = msg
                self._remove_home()
                self.ready.set()
            elif event == "unusable":
                self.failure = "the warm worker cannot fork safely: " + str(msg.get("reason"))
                self.ready.set()
            elif event == "forked":
                child = ForkedChild(int(msg["pid"]), fds[0], int(msg.get("inherited_bytes") or 0))
                with self._lock:
                    self._children[child.pid] = child
                self._answer(msg["id"], child)
            elif event == "fork_failed":
                for fd in fds:
                    os.close(fd)
                self._answer(msg["id"], ForkUnavailable("the warm worker refused: " + str(msg.get("reason"))))
                if msg.get("unsafe"):  # it is no longer fit to fork: a new one for later evaluations
                    self.retire()
            elif event == "exited":
                with self._lock:
                    child = self._children.pop(int(msg["pid"]), None)
                    idle = self._retiring and not self._children
                if child is not None:
                    child._exited(int(msg["returncode"]))
                if idle:
                    self.stop()

    def _death(self) -> str:
        """Why the zygote's socket closed: how it exited, and the end of what it printed."""
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
        tail = ""
        try:
            self._log.seek(0)
            tail = self._log.read()[-1500:].decode(errors="replace").strip()
        except (OSError, ValueError):
            pass
        return f"the warm worker {how}" + (f":\n{tail}" if tail else "")

    def _answer(self, request_id: int, answer: Any) -> None:
        with self._lock:
            slot = self._pending.pop(request_id, None)
        if slot is not None:
            slot[1] = answer
            slot[0].set()

    def _end(self, reason: str) -> None:
        with self._lock:
            self.gone = self.gone or reason
            pending, self._pending = self._pending, {}
            children, self._children = self._children, {}
        for slot in pending.values():
            slot[1] = ForkUnavailable(self.gone)
            slot[0].set()
        for child in children.values():
            child._lose(self.gone)
        self.ready.set()
        with _REGISTRY:
            if _SERVERS.get(self.key) is self:
                del _SERVERS[self.key]
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.sock, self._log):
            if f is not None:
                f.close()
        self._remove_home()

    def _remove_home(self) -> None:
        if self._home:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    # -- the callers' side ----------------------------------------------------------------------------
    def fork(self, env: dict[str, str], cwd: str, job_path: str, fds: tuple[int, ...]) -> ForkedChild:
        """One child (see `fork_child`). Raises ForkUnavailable."""
        request_id = next(self._ids)
        slot: list = [threading.Event(), None]
        with self._lock:
            if self.gone is not None or self._retiring:
                raise _Gone(self.gone or "the warm worker is being replaced")
            self._pending[request_id] = slot
        # what a spawned child inherits from the calling thread (a pool may pin its threads' cores)
        affinity = sorted(os.sched_getaffinity(0))
        body = json.dumps({"op": "fork", "id": request_id, "env": env, "cwd": cwd, "job": job_path,
                           "affinity": affinity, "nice": os.getpriority(os.PRIO_PROCESS, 0)})  # fmt: skip
        try:
            with self._send:
                socket.send_fds(self.sock, [body.encode()], list(fds))
        except OSError as e:  # it has died, and this thread saw it first: the request did not reach it
            with self._lock:
                self._pending.pop(request_id, None)
                self.gone = self.gone or f"could not reach the warm worker: {e}"
            raise _Gone(self.gone) from None
        if not slot[0].wait(FORK_REPLY_TIMEOUT_S):
            self.stop()  # stopped or stuck: a new one for the next evaluation
            raise ForkUnavailable(f"the warm worker did not answer within {FORK_REPLY_TIMEOUT_S:g} s")
        if isinstance(slot[1], ForkUnavailable):
            raise slot[1]
        return slot[1]

    def retire(self) -> None:
        """Fork nothing more; stop once the children it forked have ended."""
        with self._lock:
            self._retiring = True
            idle = not self._children
        if idle:
            self.stop()

    def stop(self) -> None:
        """Kill the zygote (its children still running end with it) and wait for it."""
        with self._lock:
            self.gone = self.gone or "the warm worker was stopped"
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


# ------------------------------------------------------------------------------------- zygote side
def _serve(parent_pid: int, sock_fd: int) -> None:
    """The zygote's main: import, check, say ready, then fork on request until the harness goes."""
    from kb_agent.evaluator.procs import die_with_parent

    die_with_parent(parent_pid)
    sock = socket.socket(fileno=sock_fd)
    start_dir = sys.path[0]  # `-m` put the start folder first, where a spawned worker has its work folder
    failure = _preload()
    os.chdir("/")  # its start folder is removed once it is ready
    if failure is None:
        _stop_blas_threads()
        gc.collect()
        gc.freeze()  # the children's collections skip these objects, so leave their shared pages uncopied
        failure = _unsafe()
    if failure is not None:
        _send(sock, {"event": "unusable", "reason": failure})
        return
    _send(sock, {"event": "ready", "pid": os.getpid(), "threads": _thread_count(), "cuda": False,
                 "modules": len(sys.modules), "inherited_bytes": _anon_bytes()})  # fmt: skip
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    closing = (sock, wake_r, wake_w)
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if sock in ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except OSError:
                return
            if not data:  # the harness has gone
                return
            _handle(sock, json.loads(data), fds, closing, start_dir)
        _reap(sock)


def _handle(sock: socket.socket, req: dict, fds: list[int], closing: tuple, start_dir: str) -> None:
    """Fork the child a request asks for and answer with its pid and a pidfd, or say why not."""
    try:
        if len(fds) != 5:
            _send(
                sock,
                {"event": "fork_failed", "id": req.get("id"), "reason": f"{len(fds)} descriptors, not 5"},
            )
            return
        reason = _unsafe()
        if reason is not None:
            _send(sock, {"event": "fork_failed", "id": req.get("id"), "reason": reason, "unsafe": True})
            return
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as e:
            _send(sock, {"event": "fork_failed", "id": req.get("id"), "reason": f"fork failed: {e}"})
            return
        if pid == 0:
            _child(req, fds, closing, start_dir)
        pidfd = os.pidfd_open(pid)  # not yet reaped: this is the child's pid
        try:
            reply = {"event": "forked", "id": req.get("id"), "pid": pid, "inherited_bytes": _anon_bytes()}
            socket.send_fds(sock, [json.dumps(reply).encode()], [pidfd])
        finally:
            os.close(pidfd)
    finally:
        for fd in fds:
            os.close(fd)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"event": "exited", "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, msg: dict) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:  # the harness has gone; the loop ends at the next read
        pass


def _preload() -> str | None:
    """Import `PRELOAD`, then `warm_caches()`; why the zygote cannot serve (torch does not import), else
    None."""
    for name in PRELOAD:
        try:
            __import__(name)
        except BaseException as e:  # noqa: BLE001 - an optional module may fail any way; torch may not
            if name == "torch":
                return f"importing torch failed: {type(e).__name__}: {e}"
    warm_caches()
    return None


def warm_caches() -> None:
    """Compute what every child would compute the same way and keeps in a process-wide cache, so that
    each forked child inherits it: Triton's hash of its own installed files (`triton_key`, part of every
    Triton kernel's cache key; 0.65 s of every Triton evaluation's child on the H200, 2026-12-03), and
    the aten ops strict mode's dispatch guard watches (`strict._harness_ops`: the comparison recorded
    once on small CPU tensors; 0.3 s of every strict evaluation on a 2-core CPU). No candidate code, no
    CUDA, no thread started (`_unsafe` checks after). Best effort: a failure leaves the child to compute it."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # noqa: BLE001, S110 - no Triton, or one without the function
        pass
    try:
        import torch
        from kb_agent.evaluator.strict import _harness_ops

        _harness_ops(torch)
    except Exception:  # noqa: BLE001, S110 - the child records them itself
        pass


def _thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def _mapped(fragment: str) -> list[str]:
    """Paths of the mapped files whose name contains `fragment`, from /proc/self/maps."""
    found = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and fragment in parts[5]:
                found.append(parts[5].strip())
    return list(dict.fromkeys(found))


def _stop_blas_threads() -> None:
    """Stop OpenBLAS's thread pool (numpy starts it at import) with its own blas_thread_shutdown_, what
    its fork handler does before every fork; it starts again on first use, in a child."""
    for path in _mapped("openblas"):
        try:
            shutdown = getattr(ctypes.CDLL(path, mode=os.RTLD_NOLOAD), "blas_thread_shutdown_", None)
        except OSError:
            continue
        if shutdown is not None:
            shutdown()


def _cuda_touched() -> str | None:
    """How CUDA has been initialised in this process, or None when it has not."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "torch has initialised CUDA"
    except Exception as e:  # noqa: BLE001
        return f"torch.cuda.is_initialized() failed: {e}"
    for path in _mapped("libcuda.so"):
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
            count = ctypes.c_int(0)
            rc = lib.cuDeviceGetCount(ctypes.byref(count))
        except (OSError, AttributeError) as e:
            return f"{path} is loaded and could not be asked whether cuInit ran: {e}"
        if rc != _CUDA_ERROR_NOT_INITIALIZED:
            return f"the CUDA driver has been initialised (cuDeviceGetCount answered {rc}, not 3)"
    return None


def _unsafe() -> str | None:
    """Why forking now is unsafe (more than one thread, CUDA touched), or None."""
    n = _thread_count()
    if n != 1:
        names = []
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        return f"{n} threads ({', '.join(names)}), not 1"
    return _cuda_touched()


def _anon_bytes() -> int:
    """This process's anonymous resident memory (RssAnon of /proc/self/status), bytes: what a forked
    child's RSS counts of it from the start (file pages are not copied at a fork)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _child(req: dict, fds: list[int], closing: tuple, start_dir: str) -> NoReturn:
    """In the forked child: become what `python -m kb_agent.evaluator.worker` would be, then run
    `worker.main` with a spawned worker's argv. Never returns."""
    try:
        chan, key, sweep, out, err = fds
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock, wake_r, wake_w = closing
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
        os.setsid()  # its own session and process group, as start_new_session=True gives a spawned one
        os.dup2(out, 1)
        os.dup2(err, 2)
        keep = {0, 1, 2, chan, key, sweep}
        for name in os.listdir("/proc/self/fd"):  # as Popen's close_fds: only what the worker is given
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        os.chdir(req["cwd"])
        _inherit_thread_settings(req)
        os.environ.clear()
        os.environ.update(req["env"])
        _reset_cached_state(req["cwd"], start_dir)
        from kb_agent.evaluator import worker

        sys.argv = [worker.__file__, str(chan), req["job"], str(key), str(os.getppid()), str(sweep)]
        sys.orig_argv = [sys.executable, "-m", "kb_agent.evaluator.worker", *sys.argv[1:]]
        sys.modules["__main__"] = worker  # the entry module strict mode's tamper guard watches
        worker.main(sys.argv)
    except BaseException:  # noqa: BLE001 - the evaluator's own failure: on the captured stderr
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(70)


def _inherit_thread_settings(req: dict) -> None:
    """The CPU affinity and nice value of the harness thread that asked, which a child spawned from that
    thread would have inherited (a higher priority than the zygote's cannot be taken: it stays)."""
    try:
        os.sched_setaffinity(0, req["affinity"])
    except (KeyError, OSError, ValueError):
        pass
    try:
        if req["nice"] > os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, req["nice"])
    except (KeyError, OSError, TypeError):
        pass


def _reset_cached_state(cwd: str, start_dir: str) -> None:
    """Recompute what the zygote's imports derived from its own cwd, HOME and TMPDIR, as a spawned
    worker's imports would have from the evaluation's (found by scanning every module's globals for
    the zygote's folder: tests/evaluator/test_zygote.py). Each is best effort: a library version
    without the attribute has nothing to reset."""
    import importlib

    sys.path[:] = [cwd if p == start_dir else p for p in sys.path]
    sys.path_importer_cache.pop(start_dir, None)
    importlib.invalidate_caches()
    tempfile.tempdir = None
    steps = (
        ("site", _reset_site),
        ("inspect", lambda m: (m.modulesbyfile.clear(), m._filesbymodname.clear())),  # cwd-relative keys
        ("multiprocessing.process", lambda m: setattr(m, "ORIGINAL_DIR", os.path.abspath(cwd))),
        ("numpy.random", lambda m: m.seed()),  # its global generator was seeded once, in the zygote
        ("triton.knobs", _reset_triton),
        ("torch._dynamo.package", _reset_dynamo_cache),
        ("torch._dynamo.config", _reset_dynamo_config),
    )
    for name, step in steps:
        module = sys.modules.get(name)
        if module is not None:
            try:
                step(module)
            except Exception:  # noqa: BLE001, S110 - another version of the library: nothing to reset
                pass


def _reset_site(site) -> None:
    site.USER_BASE = None
    site.USER_SITE = None
    site.getuserbase()
    site.getusersitepackages()
    import sysconfig

    if sysconfig._CONFIG_VARS is not None and "userbase" in sysconfig._CONFIG_VARS:
        sysconfig._CONFIG_VARS["userbase"] = site.getuserbase()


def _reset_triton(knobs) -> None:
    vars(type(knobs.cache))["home_dir"].default = os.path.expanduser("~/")


def _reset_dynamo_cache(package) -> None:
    # what cache_dir() gives, without its side effects (it sets TORCHINDUCTOR_CACHE_DIR and makes the
    # folder, as a spawned child does only once something imports torch._dynamo)
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    package.DynamoCache._path_prefix = os.path.join(os.path.abspath(base), "dynamo")


def _reset_dynamo_config(config) -> None:
    config._config["debug_dir_root"].default = config.default_debug_dir_root()


if __name__ == "__main__" and len(sys.argv) == 3:
    _serve(int(sys.argv[1]), int(sys.argv[2]))
