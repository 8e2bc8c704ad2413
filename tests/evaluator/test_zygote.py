"""The fork server (evaluator/zygote.py): children forked from a warm worker are as isolated as spawned
ones, give the same results, and the warm worker itself stays single-threaded, CUDA-free and secret-free.
Real processes, real signals; CPU candidates under the Triton interpreter or plain torch."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kb_agent.evaluator import EvalSettings, StageLimits, Status, evaluate, zygote
from kb_agent.evaluator.procs import descendants, process_table
from kb_agent.evaluator.runner import child_env
from kb_agent.evaluator.sandbox import landlock_abi
from kb_agent.problems import resolve_one

pytestmark = pytest.mark.skipif(zygote.unavailable() is not None, reason="no fork server here")
CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
HONEST = (CANDIDATES / "triton_relu.py").read_text()


def run(src: str, **settings):
    settings.setdefault("device", "cpu")
    return evaluate(resolve_one("toy/relu"), src, EvalSettings(**settings))


def cand(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


def forked(r) -> bool:
    return r.child_start.get("method") == "fork"


def server(tmp_path, device: str = "cpu") -> zygote.ForkServer:
    """The zygote this process's evaluations on `device` use now."""
    key = zygote.server_key(child_env(EvalSettings(device=device), tmp_path, tmp_path), device)
    return zygote._SERVERS[key]


def _gone(pid: int, within_s: float = 10.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if pid not in process_table():
            return True
        time.sleep(0.05)
    return False


def test_the_warm_worker_has_one_thread_no_cuda_and_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "kb-fake-secret")
    r = run(HONEST)
    assert r.status == Status.CORRECT and forked(r), (r.message, r.child_start)
    z = server(tmp_path)
    pid = z.proc.pid
    assert z.info["threads"] == 1 and z.info["cuda"] is False and z.info["modules"] > 500
    assert os.listdir(f"/proc/{pid}/task") == [str(pid)]  # one thread, seen from outside too
    assert "libcuda.so" not in Path(f"/proc/{pid}/maps").read_text()
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in env if b"OPENAI_API_KEY" in e or b"kb-fake-secret" in e]
    assert b"TRITON_INTERPRET=1" in env  # the CPU's zygote imported triton under the interpreter
    (home,) = [e[len(b"HOME=") :].decode() for e in env if e.startswith(b"HOME=")]
    assert os.readlink(f"/proc/{pid}/cwd") == "/" and not Path(home).exists()  # its start folder is gone


def test_the_checks_before_a_fork_see_a_second_thread_and_cuda(monkeypatch):
    assert zygote._unsafe() is None or "threads" in zygote._unsafe()  # pytest may run threads of its own
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="kb-test-thread")
    t.start()
    try:
        assert "threads (" in zygote._unsafe() and ", not 1" in zygote._unsafe()
    finally:
        stop.set()
        t.join()

    assert zygote._cuda_touched() is None  # this process imported torch and never started CUDA

    class Cuda:
        @staticmethod
        def is_initialized():
            return True

    monkeypatch.setitem(sys.modules, "torch", type("torch", (), {"cuda": Cuda}))
    assert zygote._cuda_touched() == "torch has initialised CUDA"


def test_keys_and_switches():
    env = {"PATH": "/bin", "HOME": "/a", "TMPDIR": "/b", "PYTEST_CURRENT_TEST": "x"}
    assert zygote.server_key(env, "cpu") == zygote.server_key({**env, "HOME": "/c"}, "cpu")
    assert zygote.server_key(env, "cuda:1") == zygote.server_key(env, "cuda")
    assert zygote.server_key(env, "cpu") != zygote.server_key(env, "cuda")
    assert zygote.server_key(env, "cpu") != zygote.server_key({**env, "TRITON_INTERPRET": "1"}, "cpu")
    assert "fork_server=False" in zygote.unavailable(False)
    os.environ[zygote.FORK_SERVER_ENV] = "0"
    try:
        assert "KB_FORK_SERVER=0" in zygote.unavailable(True)
    finally:
        del os.environ[zygote.FORK_SERVER_ENV]


FACTS = '''
import json, os, sys, tempfile, threading
import torch, torch.nn as nn


def _scan(obj, path, depth, seen, found):
    """Strings naming the warm worker's start folder, reachable from module globals."""
    if depth > 3 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, str):
        if "kb-zygote-" in obj:
            found.append(path)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(list(obj)[:300]):
            _scan(v, f"{path}[{i}]", depth + 1, seen, found)
    elif isinstance(obj, dict):
        for k, v in list(obj.items())[:3000]:
            _scan(k, f"{path}.key", depth + 1, seen, found)
            _scan(v, f"{path}[{k!r}]", depth + 1, seen, found)
    elif isinstance(obj, type) or (hasattr(obj, "__dict__") and not callable(obj)):
        try:
            items = list(vars(obj).items())
        except TypeError:
            return
        for k, v in items:
            _scan(v, f"{path}.{k}", depth + 1, seen, found)


def _facts():
    wd = os.getcwd()
    seen, found = set(), []
    for name, module in list(sys.modules.items()):
        if module is not None and name not in ("os", "kb_candidate"):
            for k, v in list(getattr(module, "__dict__", {}).items()):
                _scan(v, f"{name}.{k}", 0, seen, found)
    try:
        import triton.knobs as knobs
        triton_home = vars(type(knobs.cache))["home_dir"].default == os.path.join(wd, "home", "")
    except Exception:
        triton_home = None
    return {
        "cwd": os.path.basename(wd).startswith("kb-eval-"),
        "path0": sys.path[0] == wd,
        "tempdir": tempfile.gettempdir() == os.path.join(wd, "tmp"),
        "home": os.path.expanduser("~") == os.path.join(wd, "home"),
        "triton_home": triton_home,
        "argv": [os.path.basename(sys.argv[0]), len(sys.argv), sys.argv[2].endswith(".json")],
        "main": os.path.basename(getattr(sys.modules["__main__"], "__file__", "")),
        "session": os.getsid(0) == os.getppid() and os.getpgrp() == os.getpid(),
        "threads": threading.active_count(),
        "env": sorted(os.environ),
        "stdin": os.readlink("/proc/self/fd/0"),
        "fds": len(os.listdir("/proc/self/fd")),
        "found": found[:10],
    }


print("FACTS " + json.dumps(_facts()))


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def _facts(r) -> dict:
    (line,) = [s for s in r.stdout.splitlines() if s.startswith("FACTS ")]
    return json.loads(line[len("FACTS ") :])


def test_a_forked_child_is_what_a_spawned_one_is():
    spawned, fork = run(FACTS, strict=False, fork_server=False), run(FACTS, strict=False)
    assert spawned.child_start["method"] == "spawn" and forked(fork), fork.child_start
    assert "turned off" in spawned.child_start["reason"]
    a, b = _facts(spawned), _facts(fork)
    assert b["found"] == [], b["found"]  # no module still holds a path of the warm worker's folder
    assert a == b
    assert (
        a["cwd"]
        and a["path0"]
        and a["tempdir"]
        and a["home"]
        and a["session"]
        and a["argv"][0] == "worker.py"
    )


def _essentials(r) -> dict:
    checks = (r.strict or {}).get("checks") or {}
    message = re.sub(r"\d+", "N", r.message)  # a crash's stderr tail names the pid and the time
    return {"status": r.status, "message": message, "backend": r.backend, "compile_ok": r.compile.ok,
            "results": r.correctness.results, "trials": (r.correctness.trials, r.correctness.passed),
            "checks": {k: c["passed"] for k, c in checks.items()}, "timing_method": r.timing.method}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", ["triton_relu_off_by_one", "triton_relu", "raises", "exits"])
def test_forked_and_spawned_evaluations_give_the_same_result(name):
    spawned, fork = run(cand(name), fork_server=False), run(cand(name))
    assert spawned.child_start["method"] == "spawn" and forked(fork), fork.child_start
    assert _essentials(fork) == _essentials(spawned)
    assert fork.stages["setup"] < spawned.stages["setup"]


def test_secrets_are_absent_from_a_forked_child(monkeypatch):
    names = ["OPENAI_API_KEY", "HF_TOKEN", "GITHUB_PAT", "DATABASE_URL", "KB_DB", "AWS_SECRET_ACCESS_KEY"]
    for name in names:
        monkeypatch.setenv(name, "kb-fake-secret")
    src = (
        "import os, torch, torch.nn as nn\n"
        f"leaked = [k for k in {names!r} if k in os.environ]\n"
        "leaked += ['proc'] if b'kb-fake-secret' in open('/proc/self/environ', 'rb').read() else []\n"
        "leaked += ['parent'] if b'kb-fake-secret' in open(f'/proc/{os.getppid()}/environ', 'rb').read() else []\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x) + (1.0 if leaked else 0.0)\n"
    )  # fmt: skip
    r = run(src, strict=False)  # parity mode: nothing stops the reads
    assert r.status == Status.CORRECT and forked(r), (r.message, r.child_start)


def test_a_hang_times_out_and_nothing_of_it_is_left(tmp_path):
    t0 = time.perf_counter()
    r = run(cand("hangs"), limits=StageLimits(correctness_s=0.5))
    assert r.status == Status.TIMEOUT and forked(r), (r.message, r.child_start)
    assert "correctness stage ran past its 0.5 s limit" in r.message
    assert time.perf_counter() - t0 < 20
    z = server(tmp_path)
    assert not descendants(z.proc.pid) and not z._children  # reaped, and its status reported


@pytest.mark.parametrize(
    "name,says",
    [("exits", "exited with code 3"), pytest.param("segfault", "SIGSEGV", marks=pytest.mark.slow)],
)
def test_a_crash_or_exit_of_a_forked_child_is_a_status(name, says):
    r = run(cand(name))
    assert r.status == Status.RUNTIME_ERROR and forked(r), (r.message, r.child_start)
    assert says in r.message


@pytest.mark.slow
def test_the_memory_limit_holds_and_leaves_an_honest_candidate_its_budget():
    hog = HONEST.replace("        x = x.contiguous()\n",
                         "        self.big = torch.ones(400_000_000)\n        __import__('time').sleep(4)\n"
                         "        x = x.contiguous()\n", 1)  # fmt: skip
    r = run(hog, strict=False, max_memory_gb=1.0)
    assert r.status == Status.RUNTIME_ERROR and forked(r), (r.message, r.child_start)
    assert "used more than 1 GiB of host memory" in r.message
    # a spawned child's group stays under 0.5 GiB here; the forked one's supervising half counts the
    # warm worker's pages it shares, which the limit allows for
    r = run(HONEST, max_memory_gb=0.5)
    assert r.status == Status.CORRECT and forked(r), (r.message, r.child_start)


def test_forged_channel_lines_from_a_forked_child_are_rejected():
    r = run(cand("forge_channel"))
    assert r.status == Status.REJECTED and forked(r), (r.message, r.child_start)
    assert "private result channel" in r.message and r.speedup is None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
def test_a_process_that_double_forks_out_of_a_forked_child_is_swept():
    marker = f"{6000 + os.getpid() % 1000}.7"
    head = (
        f"import ctypes\nlibc = ctypes.CDLL(None)\nif libc.fork() == 0:\n    libc.setsid()\n"
        f"    if libc.fork() == 0:\n        libc.execv(b'/bin/sleep', (ctypes.c_char_p * 3)(b'sleep', b'{marker}', None))\n"
        f"    libc._exit(0)\n"
    )  # fmt: skip
    r = run(head + HONEST, strict=False)
    leftover = [pid for pid in process_table() if marker.encode() in _cmdline(pid)]
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    assert not leftover, r.message
    assert r.status == Status.CORRECT and forked(r), (r.message, r.child_start)
    assert "killed 1 process(es) the evaluation left running" in r.stderr


def _native_write(target: Path) -> str:
    """The honest candidate, plus a torch.save (C++'s file writer: no Python audit event) to `target`."""
    assert HONEST.rstrip().endswith("return y")
    return HONEST.rstrip()[: -len("return y")] + f"torch.save(y, {str(target)!r})\n        return y\n"


@pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")
def test_strict_modes_sandbox_holds_in_a_forked_child(tmp_path):
    target = tmp_path / "answers.pt"
    r = run(_native_write(target), correctness_trials=1, timed_trials=2)
    assert r.status == Status.RUNTIME_ERROR and forked(r), (r.message, r.child_start)
    assert "strict mode's sandbox: files may be written only in" in r.message
    assert not target.exists() and r.strict["sandbox"]["landlock_abi"] >= 1


KILL_ZYGOTE = """
import os, signal, time
with open(f"/proc/{os.getppid()}/stat") as f:  # the supervising half, whose parent is the warm worker
    zygote = int(f.read().rsplit(")", 1)[1].split()[1])
os.kill(zygote, signal.SIGKILL)
time.sleep(10)
"""


@pytest.mark.slow
def test_a_candidate_that_kills_the_warm_worker_ends_only_itself_and_the_next_evaluation_forks(tmp_path):
    run(HONEST)
    before = server(tmp_path).proc.pid
    r = run(KILL_ZYGOTE + HONEST, strict=False)
    assert r.status == Status.RUNTIME_ERROR and forked(r), (r.message, r.child_start)
    assert "warm worker this evaluation was forked from died during it" in r.message, r.message
    assert _gone(before)
    r = run(HONEST)
    assert r.status == Status.CORRECT and forked(r), (r.message, r.child_start)
    assert server(tmp_path).proc.pid != before


@pytest.mark.skipif(landlock_abi() < 6, reason="Landlock scopes signals from ABI 6 (Linux 6.12)")
def test_under_strict_modes_sandbox_the_warm_worker_cannot_be_signalled(tmp_path):
    run(HONEST)
    before = server(tmp_path).proc.pid
    r = run(KILL_ZYGOTE + HONEST)
    assert r.status == Status.COMPILE_ERROR and "PermissionError" in r.message, r.message
    assert server(tmp_path).proc.pid == before and before in process_table()


@pytest.mark.slow
def test_threads_share_one_warm_worker_that_outlives_the_thread_that_started_it(tmp_path):
    zygote.stop_all()  # a zygote started by one of the threads below
    results = []
    threads = [threading.Thread(target=lambda: results.append(run(HONEST))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [(r.status, r.child_start["method"]) for r in results] == [(Status.CORRECT, "fork")] * 2
    pid = server(tmp_path).proc.pid
    time.sleep(0.5)  # PR_SET_PDEATHSIG follows the starting thread: the zygote must not die with it
    r = run(HONEST)
    assert r.status == Status.CORRECT and forked(r) and server(tmp_path).proc.pid == pid


@pytest.mark.slow
def test_a_warm_worker_that_cannot_fork_safely_means_spawned_children(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()  # a thread started as every interpreter starts: the zygote can never be single-threaded
    (site / "sitecustomize.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    for _ in range(2):
        r = run(HONEST, strict=False)
        assert r.status == Status.CORRECT and r.child_start["method"] == "spawn", r.child_start
        assert "cannot fork safely: 2 threads" in r.child_start["reason"]


@pytest.mark.slow
def test_the_warm_worker_dies_with_the_harness(tmp_path):
    code = (
        "import sys\nfrom kb_agent.evaluator import EvalSettings, evaluate, zygote\n"
        "from kb_agent.problems import resolve_one\n"
        f"r = evaluate(resolve_one('toy/relu'), {HONEST!r}, EvalSettings(device='cpu', strict=False))\n"
        "(s,) = zygote._SERVERS.values()\nprint(r.child_start['method'], s.proc.pid, flush=True)\n"
        "import time\ntime.sleep(600)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    try:
        method, pid = p.stdout.readline().split()
        assert method == "fork" and int(pid) in process_table()
    finally:
        p.kill()
        p.wait()
    assert _gone(int(pid), 5.0), "the warm worker outlived the harness"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda_relu", "triton_relu"])
def test_cuda_and_triton_candidates_forked_on_the_gpu(tmp_path, name):
    """On the H200: `pytest -q -m gpu tests/evaluator/test_zygote.py`. Each forked child starts CUDA
    itself (its own context); the zygote still holds one thread and no CUDA after both."""
    times = {}
    for fork_server in (False, True, True):
        t0 = time.perf_counter()
        r = evaluate(
            resolve_one("toy/relu"), cand(name), EvalSettings(device="cuda", fork_server=fork_server)
        )
        times.setdefault(r.child_start["method"], []).append(round(time.perf_counter() - t0, 2))
        assert r.status == Status.CORRECT, r.message
        assert r.child_start["method"] == ("fork" if fork_server else "spawn"), r.child_start
        assert r.hardware.gpu_name and r.timing.method == "cuda_event_sync"
    z = server(tmp_path, "cuda")
    assert z.info["threads"] == 1 and os.listdir(f"/proc/{z.proc.pid}/task") == [str(z.proc.pid)]
    print(f"\n{name}: wall seconds per evaluation {times}; zygote {z.info}")


@pytest.mark.slow
def test_no_preloaded_module_asks_whether_cuda_is_available_at_import():
    """On a GPU machine, torch.cuda.is_available() or device_count() at import runs cuInit, which starts a
    driver thread and leaves a driver no forked child can use: torch.utils.cpp_extension did that in the
    warm worker on the H200, and every evaluation was spawned. Here every preloaded module is imported
    in a fresh interpreter with those calls made to fail loudly, and so are the caches the zygote warms
    (which must then hold Triton's key and the ops strict mode's dispatch guard watches)."""
    probe = (
        "import sys, importlib, torch\n"
        "asked = []\n"
        "def ask(*a, **k):\n"
        "    import traceback; asked.append(''.join(traceback.format_stack(limit=6)))\n"
        "    return False\n"
        "torch.cuda.is_available = torch.cuda.device_count = ask\n"
        "from kb_agent.evaluator.zygote import PRELOAD\n"
        "for name in PRELOAD:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        pass\n"
        "    if asked:\n"
        "        sys.exit(f'{name} asked at import:\\n' + asked[0])\n"
        "from kb_agent.evaluator.zygote import warm_caches\n"
        "warm_caches()\n"
        "if asked:\n"
        "    sys.exit('warm_caches asked:\\n' + asked[0])\n"
        "from triton.runtime.cache import triton_key\n"
        "assert triton_key.cache_info().currsize == 1, 'triton_key not computed'\n"
        "from kb_agent.evaluator.strict import _harness_ops\n"
        "assert _harness_ops.cache_info().currsize == 1, 'the dispatch guard ops not recorded'\n"
        "assert {'aten::equal', 'aten::normal_', 'aten::_unsafe_view'} <= _harness_ops(torch)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    # and the one module known to ask is not among them
    assert "torch.utils.cpp_extension" not in zygote.PRELOAD
