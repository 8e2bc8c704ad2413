"""The evaluator end to end on the CPU: Triton candidates under the interpreter, faults in the child."""

import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from kb_agent.evaluator import EvalResult, EvalSettings, StageLimits, Status, evaluate
from kb_agent.problems import resolve_one

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"


def run(name: str, problem: str = "toy/relu", **settings) -> EvalResult:
    settings.setdefault("device", "cpu")
    return evaluate(resolve_one(problem), (CANDIDATES / f"{name}.py").read_text(), EvalSettings(**settings))


def test_a_triton_candidate_where_cuda_was_asked_for_is_rejected_in_strict_mode():
    r = run("triton_relu", backend="cuda")
    assert r.status == Status.REJECTED, r.message
    assert r.strict["parity_status"] == "correct"
    assert (
        "cuda kernels were asked for; this candidate's are triton"
        in r.strict["checks"]["requested_backend"]["detail"]
    )


@pytest.mark.slow
def test_a_triton_candidate_where_cuda_was_asked_for_is_correct_in_parity_mode():
    assert run("triton_relu", backend="cuda", strict=False).status == Status.CORRECT  # recorded only


def test_correct_triton_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its work directory goes
    r = run("triton_relu")
    assert not list(tmp_path.glob("kb-eval-*"))  # removed when the evaluation ends
    assert r.status == Status.CORRECT, r.message
    assert r.backend == "triton" and r.compile.ok
    assert r.correctness.passed == r.correctness.trials == 5
    assert (r.correctness.atol, r.correctness.rtol) == (1e-4, 1e-4)
    assert r.timing.method == "cpu_perf_counter" and r.runtime_ms > 0 and r.ref_runtime_ms > 0
    assert r.speedup == pytest.approx(r.ref_runtime_ms / r.runtime_ms)
    assert r.hardware.torch and r.hardware.precision == "fp32"
    assert EvalResult.from_json(r.to_json()) == r


@pytest.mark.slow
def test_cyclic_garbage_of_an_honest_kernel_is_collected_between_its_calls_in_strict_mode():
    """helper-23 (2026-12-07): with the collector off after the constructor (`strict.pause_collections`),
    the reference cycle Triton's interpreter leaves around every launch's arguments was never freed, and
    an honest kernel on a 16M-element problem was killed at the memory limit. Strict mode now collects
    the young generations right before each checked call (`strict.collect_garbage`); this candidate
    raises once four of its calls have left garbage that nothing collected."""
    r = run("triton_relu_cyclic_garbage")
    assert r.status == Status.CORRECT, r.message


def test_one_element_off_is_incorrect_with_a_useful_diff():
    r = run("triton_relu_off_by_one")
    assert r.status == Status.INCORRECT
    t = r.correctness.results[0]
    assert not t.passed and t.problem == "values"
    assert t.mismatched == 1 and t.numel == 16 * 1024
    assert t.max_abs_diff == pytest.approx(1.0, abs=1e-3)
    assert t.first_mismatches[0]["index"] == [0, 7]


@pytest.mark.slow
def test_wrong_shape():
    r = run("wrong_shape")
    assert r.status == Status.INCORRECT
    t = r.correctness.results[0]
    assert t.problem == "shape" and t.expected_shape == [16, 1024] and t.actual_shape == [16, 1023]


@pytest.mark.slow
def test_nan_never_passes():
    r = run("nan_output")
    assert r.status == Status.INCORRECT
    assert r.correctness.results[0].nan_actual == 1 and r.correctness.results[0].mismatched == 1


def test_triton_compile_error():
    r = run("triton_compile_error")
    assert r.status == Status.COMPILE_ERROR
    assert "undefined_name" in r.message and "candidate line" in r.message


def test_libdevice_under_the_interpreter_is_a_runtime_error_that_says_why():
    # helper-26: Triton's interpreter returns None for libdevice calls, and a kernel that compiles on a
    # GPU read as a compile error on the CPU
    r = run("triton_relu_libdevice")
    assert r.status == Status.RUNTIME_ERROR
    assert "libdevice, which Triton's interpreter" in r.message and "evaluate it on a GPU" in r.message


def test_bf16_under_the_interpreter_says_the_verdict_may_be_the_interpreters():
    # helper-32: Triton's interpreter raises on some bfloat16 arithmetic (a compile_error blamed the
    # candidate) and gets other bf16 arithmetic wrong (an incorrect verdict with a misleading diagnosis)
    src = (CANDIDATES / "triton_relu.py").read_text()
    line = "tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)"
    raises = src.replace(line, "tl.store(y_ptr + offs, tl.maximum(x * 0.5 + x * 0.5, 0.0), mask=mask)")
    wrong = src.replace(line, "tl.store(y_ptr + offs, tl.maximum(x, 1.0), mask=mask)")
    assert src != raises and src != wrong
    settings = EvalSettings(device="cpu", precision="bf16", correctness_trials=1, timed_trials=2)
    r = evaluate(resolve_one("toy/relu"), raises, settings)
    assert r.status == Status.RUNTIME_ERROR and "bfloat16 arithmetic, which Triton's interpreter" in r.message
    r = evaluate(resolve_one("toy/relu"), wrong, settings)
    assert r.status == Status.INCORRECT and "computes bfloat16 arithmetic wrongly" in r.message
    r = evaluate(resolve_one("toy/relu"), wrong, dataclasses.replace(settings, precision="fp32"))
    assert r.status == Status.INCORRECT and "bfloat16" not in r.message


def test_the_autotuner_under_the_interpreter_is_a_runtime_error_that_says_why():
    # helper-32: "0 active drivers" came back with no word of the autotuner or the interpreter
    src = (CANDIDATES / "triton_relu.py").read_text()
    src = src.replace(
        "@triton.jit",
        "@triton.autotune(configs=[triton.Config({}, num_warps=2), triton.Config({}, num_warps=4)], key=['n'])\n@triton.jit",
    )
    assert "autotune" in src
    r = evaluate(
        resolve_one("toy/relu"), src, EvalSettings(device="cpu", correctness_trials=1, timed_trials=2)
    )
    assert r.status == Status.RUNTIME_ERROR, r.message
    assert "autotuner (@triton.autotune) times its configurations on a GPU" in r.message


def test_python_exception_names_the_candidate_line():
    r = run("raises")
    assert r.status == Status.RUNTIME_ERROR
    assert "KeyError" in r.message and "candidate line 11, in forward" in r.message


@pytest.mark.slow
def test_syntax_error_is_a_compile_error_with_its_line():
    r = run("syntax_error")
    assert r.status == Status.COMPILE_ERROR
    assert "candidate.py(6)" in r.message


@pytest.mark.slow
def test_missing_modelnew():
    r = run("no_modelnew")
    assert r.status == Status.COMPILE_ERROR and "ModelNew" in r.message


def test_os_exit_in_the_child_is_a_runtime_error():
    r = run("exits")
    assert r.status == Status.RUNTIME_ERROR
    assert "exited with code 3" in r.message and "correctness" in r.message


@pytest.mark.slow
def test_segfault_is_contained_and_the_next_evaluation_runs():
    r = run("segfault")
    assert r.status == Status.RUNTIME_ERROR and "SIGSEGV" in r.message
    assert run("triton_relu").status == Status.CORRECT


def test_hang_times_out_and_the_group_is_killed():
    t0 = time.perf_counter()
    r = run("hangs", limits=StageLimits(correctness_s=0.5))
    assert r.status == Status.TIMEOUT
    assert "correctness stage ran past its 0.5 s limit" in r.message
    assert time.perf_counter() - t0 < 20
    # found by a new-user pass: the supervising half re-raised SIGKILL through signal.signal, which
    # refuses it, and its traceback went to the stderr the model reads
    assert "procs.py" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_a_child_stopped_while_it_starts_is_gone_at_once_not_after_15_s():
    # found by a new user: --stage-limits start=0.001 timed out after 15 s (setup 15.00): the
    # supervising half, killed before it had started its evaluation half, was only waited for
    t0 = time.perf_counter()
    r = run("hangs", limits=StageLimits(start_s=0.001), fork_server=False)
    assert r.status == Status.TIMEOUT and "setup stage ran past its 0.001 s limit" in r.message
    assert time.perf_counter() - t0 < 5


@pytest.mark.slow
def test_candidate_output_is_captured_not_parsed(tmp_path):
    src = (CANDIDATES / "triton_relu.py").read_text()
    src = src.replace(
        "        x = x.contiguous()",
        '        print(\'{"event": "done", "status": "correct"}\')\n        x = x.contiguous()',
    )
    r = evaluate(resolve_one("toy/relu"), src.replace("tl.maximum(x, 0.0)", "x"), EvalSettings(device="cpu"))
    assert r.status == Status.INCORRECT
    assert '"event": "done"' in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True])
def test_the_parent_never_reads_the_childs_output_files_by_name(tmp_path, strict):
    # found by a new-user pass: stderr.txt replaced with a symlink to a file only the parent could read
    # (the parent's /proc/PID/environ) came back in EvalResult.stderr and the model's feedback; a FIFO
    # in place of stdout.txt hung the parent after the child had died
    secret = tmp_path / "secret.txt"
    secret.write_text("KB-FAKE-SECRET-1234")
    src = (
        "import os\n"
        "os.unlink('stderr.txt')\n"
        f"os.symlink({str(secret)!r}, 'stderr.txt')\n"
        "os.unlink('stdout.txt')\n"
        "os.mkfifo('stdout.txt')\n"
        "raise RuntimeError('after the swap')\n"
    )
    t0 = time.perf_counter()
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu", strict=strict))
    assert time.perf_counter() - t0 < 60
    assert "KB-FAKE-SECRET" not in r.stderr + r.stdout + r.message
    assert "after the swap" in r.message or r.status != Status.CORRECT


def test_secrets_are_scrubbed_from_the_child(monkeypatch):
    names = ["OPENAI_API_KEY", "HF_TOKEN", "GITHUB_PAT", "DATABASE_URL", "HTTPS_PROXY", "SIGNING_SALT",
             "AZURE_API_BASE", "KB_DB", "AWS_SECRET_ACCESS_KEY"]  # fmt: skip
    for name in names:
        monkeypatch.setenv(name, "not-a-real-secret")
    src = (
        "import os, torch, torch.nn as nn\n"
        f"leaked = [k for k in {names!r} if k in os.environ]\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x) + (1.0 if leaked else 0.0)\n"
    )
    r = evaluate(
        resolve_one("toy/relu"), src, EvalSettings(device="cpu", strict=False)
    )  # plain torch: parity only
    assert r.status == Status.CORRECT, r.message


def test_values_that_carry_credentials_are_scrubbed_whatever_their_names(monkeypatch, tmp_path):
    # helper-31: PIP_INDEX_URL=https://user:token@host and REDIS_URL=redis://user:password@host reached
    # the candidate, whose stdout returns to the model; helper-34: connection strings, a token as a URL's
    # user, a query string's token, a JWT. Only what builds, CUDA, torch, Triton and Python read reaches
    # it (runner.CHILD_ENV), and of that nothing that looks like a secret.
    from kb_agent.evaluator.runner import child_env

    leaking = {"PIP_INDEX_URL": "https://deploy:glpat-abcdefgh12@gitlab.example/simple",
               "REDIS_URL": "redis://default:hunter2@cache:6379/0", "MY_SETTING": "sk-abcdefghijklmnopqrstu",
               "GH_CLI": "ghp_abcdefghijklmnopqrstuvwx", "DB_CONN": "Server=db;Password=hunter2;",
               "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=abc123==",
               "GIT_REMOTE": "https://tok123abc@github.com/x/y", "LABEL_STUDIO_URL": "https://host/api?token=abc",
               "JUPYTER_JWT": "eyJhbGciOi.eyJzdWIi.sig", "KB_SINK": "redis://default:hunter2@cache:6379/0",
               "CUDA_TOKEN_FILE": "/secrets/t"}  # fmt: skip
    kept = {"KB_NOTE": "user@example.org", "KB_MODEL": "openai/gpt-4o", "CUDA_HDR_DIR": "/opt/hdr",
            "OMP_NUM_THREADS": "4", "TRITON_PRINT_AUTOTUNING": "1"}  # fmt: skip
    for name, value in {**leaking, **kept}.items():
        monkeypatch.setenv(name, value)
    env = child_env(EvalSettings(device="cpu"), tmp_path, tmp_path / "build")
    assert not set(leaking) & set(env)
    assert {k: env.get(k) for k in kept} == kept


def test_integer_inputs_keep_their_dtype(tmp_path):
    ref = tmp_path / "7_gather.py"
    ref.write_text(
        "import torch, torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x, idx):\n"
        "        return x[torch.arange(x.shape[0]), idx]\n"
        "def get_inputs():\n"
        "    return [torch.randn(8, 5), torch.randint(0, 5, (8,))]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    src = (
        "import torch, torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x, idx):\n"
        "        assert idx.dtype == torch.int64 and x.dtype == torch.float16\n"
        "        return x.gather(1, idx[:, None])[:, 0]\n"
    )
    r = evaluate(resolve_one(str(ref)), src, EvalSettings(device="cpu", precision="fp16", strict=False))
    assert r.status == Status.CORRECT, r.message
    assert r.correctness.atol == 1e-2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_syntax_error_reports_the_line_on_a_cpu_machine(monkeypatch):
    # no CUDA_HOME (torch's load_inline refuses to start without one on a CPU build): nvcc from PATH
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    r = run("cuda_syntax_error")
    assert r.status == Status.COMPILE_ERROR, r.message
    assert r.backend == "cuda"
    assert any("cuda.cu(" in e and 'expected a ";"' in e for e in r.compile.errors), r.compile.errors
    assert "0.f" in r.message  # the offending source line is quoted


@pytest.mark.slow
def test_a_flood_without_newlines_on_the_result_channel_is_rejected_and_bounded():
    # found by a new-user pass: the parent kept an unbounded line buffer until the stage limit
    src = (
        "import os\n"
        "chunk = b'x' * (1 << 20)\n"
        "for fd in sorted(int(f) for f in os.listdir('/proc/self/fd') if int(f) > 2):\n"
        "    for _ in range(24):\n"
        "        try:\n"
        "            os.write(fd, chunk)\n"
        "        except OSError:\n"
        "            break\n"
        "os._exit(0)\n"
    )
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu", strict=False))
    assert r.status == Status.REJECTED, r.message
    assert "private result channel" in r.message


@pytest.mark.parametrize("strict", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_forged_verdict_on_the_result_channel_is_rejected(strict):
    r = run("forge_channel", strict=strict)
    assert r.status == Status.REJECTED, r.message
    assert "private result channel" in r.message
    assert r.speedup is None


def test_a_relative_or_home_build_dir_is_resolved_in_the_parent(tmp_path, monkeypatch):
    # found by a new-user pass: a relative KB_BUILD_DIR landed in each evaluation's own (deleted) work
    # directory, so nothing was ever reused
    from kb_agent.evaluator.runner import default_build_root

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KB_BUILD_DIR", "relbuild")
    assert default_build_root() == tmp_path / "relbuild"
    monkeypatch.setenv("KB_BUILD_DIR", "~/kb-build")
    assert default_build_root() == (Path.home() / "kb-build").resolve()


def _escapee_source(marker: str, hang: bool) -> str:
    """The honest Triton ReLU, plus a process that leaves the session (setsid) and loses its parent (a
    double fork), then runs `sleep <marker>`; with `hang`, forward then never returns."""
    honest = (CANDIDATES / "triton_relu.py").read_text()
    head = (
        f"import ctypes, time\nlibc = ctypes.CDLL(None)\nif libc.fork() == 0:\n    libc.setsid()\n"
        f"    if libc.fork() == 0:\n        libc.execv(b'/bin/sleep', (ctypes.c_char_p * 3)(b'sleep', b'{marker}', None))\n"
        f"    libc._exit(0)\n"
    )  # fmt: skip (libc, not os: strict mode's audit hook stops os.fork)
    if hang:
        honest = honest.replace("    def forward(self, x", "    def forward(self, x, *_):\n        while True:\n"
                                "            time.sleep(0.01)\n\n    def _unused(self, x", 1)  # fmt: skip
    return head + honest


def _running(marker: str) -> list[int]:
    from kb_agent.evaluator.procs import process_table

    found = []
    for pid in process_table():
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("strict,hang", [(False, False), (True, False), (False, True)])
def test_a_process_that_double_forks_out_of_the_session_ends_with_the_evaluation(strict, hang):
    """Found by the red team (fault_escape_process_group): killing the child's session did not reach a
    process that called setsid and was reparented to init; it outlived the evaluation."""
    marker = f"{4000 + os.getpid() % 1000}.{int(strict)}{int(hang)}"
    src = _escapee_source(marker, hang)
    limits = StageLimits(correctness_s=3) if hang else StageLimits()
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu", strict=strict, limits=limits))
    leftover = _running(marker)
    for pid in leftover:
        os.kill(pid, 9)
    assert not leftover, r.message
    if hang:
        assert r.status == Status.TIMEOUT, r.message
    elif strict:
        assert r.status == Status.REJECTED, r.message
        assert r.strict["checks"]["processes"] == {"passed": False, "detail": "left 1 process(es) running"}
    else:
        assert r.status == Status.CORRECT, r.message


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("new_session", ["once", "every_generation"])
def test_a_chain_of_processes_that_fork_and_exit_is_killed(new_session):
    """Found by a new-user pass: a process that leaves the session, then forks and exits in a loop (each
    generation lives shorter than a scan of /proc), outran the sweep and was reparented to init."""
    import sys

    marker = f"chain{os.getpid()}{new_session}"
    setsid = "    os.setsid()\n" if new_session == "every_generation" else ""
    chain = ("import os, time\nos.setsid()\nt = time.time()\nwhile time.time() - t < 8:\n    if os.fork():\n"
             f"        os._exit(0)\n{setsid}os.execv('/bin/sleep', ['sleep', '9999', '{marker}'])\n")  # fmt: skip
    head = (f"import ctypes\nlibc = ctypes.CDLL(None)\nif libc.fork() == 0:\n    argv = [{sys.executable!r}, '-c', {chain!r}]\n"
            "    libc.execv(argv[0].encode(), (ctypes.c_char_p * 4)(*[a.encode() for a in argv], None))\n"
            "    libc._exit(127)\n")  # fmt: skip
    src = head + (CANDIDATES / "triton_relu.py").read_text()
    r = evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu"))
    time.sleep(0.5)
    leftover = _running(marker)
    for pid in leftover:
        os.kill(pid, 9)
    assert not leftover, r.message
    assert r.status == Status.REJECTED and r.strict["checks"]["processes"]["passed"] is False, r.message


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_what_the_candidate_started_dies_with_a_killed_harness(tmp_path):
    """Found by a new-user pass: SIGKILL on the harness took its evaluation child along (PDEATHSIG) but
    left the processes the candidate had moved out of the session running."""
    import signal
    import subprocess
    import sys

    marker = f"{5000 + os.getpid() % 1000}.5"
    (tmp_path / "cand.py").write_text(_escapee_source(marker, hang=True))
    harness = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys; from pathlib import Path; from kb_agent.evaluator import evaluate, EvalSettings, StageLimits\n"
                "from kb_agent.problems import resolve_one\n"
                "evaluate(resolve_one('toy/relu'), Path(sys.argv[1]).read_text(), EvalSettings(device='cpu', "
                "limits=StageLimits(correctness_s=60)))"
            ),
            str(tmp_path / "cand.py"),
        ],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TMPDIR": str(tmp_path)},  # its work directory, left by the kill: not in /tmp
    )
    try:
        for _ in range(300):
            if _running(marker):
                break
            time.sleep(0.1)
        assert _running(marker), "the candidate's process never started"
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        for _ in range(50):
            if not _running(marker):
                break
            time.sleep(0.1)
        leftover = _running(marker)
    finally:
        harness.kill()
        for pid in _running(marker):
            os.kill(pid, 9)
    assert not leftover


@pytest.mark.slow
def test_forged_channel_lines_are_rejected_with_what_strict_mode_also_saw():
    """Found by a new-user pass: a libc fork at import left a copy of the evaluator running the
    evaluation too; the verdict named only the forged channel lines, not the process strict mode saw.
    (Here, deterministically: a process started, and a line written to every pipe, the channel among them.)"""
    head = ("import os, stat\ntry:\n    os.system('true')\nexcept Exception:\n    pass\n"
            "for fd in map(int, os.listdir('/proc/self/fd')):\n"
            "    try:\n        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
            "            os.write(fd, b'not the evaluator\\n')\n    except OSError:\n        pass\n")  # fmt: skip
    r = evaluate(
        resolve_one("toy/relu"),
        head + (CANDIDATES / "triton_relu.py").read_text(),
        EvalSettings(device="cpu"),
    )
    assert r.status == Status.REJECTED and "private result channel" in r.message, r.message
    assert "strict mode's checks also failed:\n- side_effects:" in r.message, r.message


@pytest.mark.slow
def test_the_count_of_processes_left_running_cannot_be_hidden_in_stderr():
    """Found by a new-user pass: the count came back as the last line of the child's stderr, which
    the candidate's processes share, write position included: one that kept seeking it into the middle
    made the line land in the part cut from a long output, and the verdict was correct."""
    head = ("import ctypes, os, time\nos.write(2, b'x' * 40000 + b'\\n')\n"
            "if ctypes.CDLL(None).fork() == 0:\n    while True:\n        os.lseek(2, 10000, os.SEEK_SET)\n"
            "        time.sleep(0.001)\n")  # fmt: skip
    r = evaluate(
        resolve_one("toy/relu"),
        head + (CANDIDATES / "triton_relu.py").read_text(),
        EvalSettings(device="cpu"),
    )
    assert r.status == Status.REJECTED, r.message
    assert r.strict["checks"]["processes"] == {"passed": False, "detail": "left 1 process(es) running"}


@pytest.mark.slow
def test_a_program_named_like_a_compiler_is_judged_by_what_runs():
    """Found by a new-user pass: strict mode named a process by its argv[0], so Popen(["gcc", ...],
    executable=python) ran any program unflagged."""
    head = "import subprocess, sys\nsubprocess.run(['gcc', '-c', 'pass'], executable=sys.executable)\n"
    r = evaluate(
        resolve_one("toy/relu"),
        head + (CANDIDATES / "triton_relu.py").read_text(),
        EvalSettings(device="cpu"),
    )
    assert r.status != Status.CORRECT and "tried to start a process" in r.message, r.message


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_process_whose_main_thread_exited_still_counts(tmp_path):
    """Found by a new-user pass: a process whose main thread called pthread_exit shows as a zombie in
    /proc/PID/stat while its other threads run; it was left out of the memory limit's sum."""
    import subprocess
    import sys

    from kb_agent.evaluator.procs import _resident_pages, group_members

    code = ("import ctypes, threading, time\nbuf = []\n"
            "threading.Thread(target=lambda: (buf.append(b'\\x01' * (200 << 20)), time.sleep(30))).start()\n"
            "time.sleep(1)\nprint('ready', flush=True)\nctypes.CDLL(None).pthread_exit(None)\n")  # fmt: skip
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert p.stdout.readline().strip() == b"ready"
        for _ in range(50):  # until the main thread is a zombie
            if Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.05)
        assert p.pid in group_members(p.pid)
        assert _resident_pages(p.pid) * os.sysconf("SC_PAGE_SIZE") > 150 << 20
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_name_no_torch_header_declares_is_a_compile_error_after_one_build(monkeypatch, tmp_path):
    # `blockDimx` is declared by no header of torch's: one compile check, not three (34 s -> 7 s here)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path))
    r = run("cuda_undefined_name")
    assert r.status == Status.COMPILE_ERROR, r.message
    assert any('identifier "blockDimx" is undefined' in e for e in r.compile.errors), r.compile.errors
    # the check's folder holds the slim try's sources, the last checked: no heavier try followed
    (cu,) = tmp_path.rglob("cuda.cu")
    assert "torch/extension.h -> torch/types.h" in cu.read_text()
    assert (cu.parent / "kb_prelude" / "ATen" / "ops" / "empty_like.h").is_file()
