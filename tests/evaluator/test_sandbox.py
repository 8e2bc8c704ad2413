"""Strict mode's Landlock sandbox (evaluator/sandbox.py), with real system calls in real child processes."""

import json
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from kb_agent.evaluator import EvalSettings, Status, evaluate
from kb_agent.evaluator.sandbox import landlock_abi
from kb_agent.problems import resolve_one

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")

PROBE = textwrap.dedent(
    """
    import ctypes, json, os, socket, subprocess, sys, threading
    sys.path.insert(0, sys.argv[1])
    from kb_agent.evaluator.sandbox import restrict
    ok_dir, out_dir, port, agent = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    info = restrict([ok_dir])
    import torch
    got = {"info": info}
    def attempt(name, fn):
        try:
            fn()
            got[name] = "done"
        except Exception as e:
            got[name] = f"{type(e).__name__}: {e}"[:200]
    attempt("python_inside", lambda: open(os.path.join(ok_dir, "a.txt"), "w").close())
    attempt("python_outside", lambda: open(os.path.join(out_dir, "a.txt"), "w").close())
    attempt("native_inside", lambda: torch.save(torch.ones(2), os.path.join(ok_dir, "t.pt")))
    attempt("native_outside", lambda: torch.save(torch.ones(2), os.path.join(out_dir, "t.pt")))
    attempt("remove_outside", lambda: os.unlink(os.path.join(out_dir, "keep.txt")))
    def in_thread():
        t = threading.Thread(target=attempt, args=("thread_outside", lambda: open(os.path.join(out_dir, "b.txt"), "w").close()))
        t.start(); t.join()
    in_thread()
    r = subprocess.run(["sh", "-c", f"echo x > {out_dir}/c.txt"], capture_output=True)
    got["shell_outside_rc"] = r.returncode
    attempt("tcp_connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close())
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    oom = f"/proc/{os.getppid()}/oom_score_adj"  # the value written back: harmless if it goes through
    attempt("parent_oom_score", lambda: open(oom, "r+").write(open(oom).read()))
    attempt("proc_sys", lambda: open("/proc/sys/vm/swappiness", "r+").write(open("/proc/sys/vm/swappiness").read()))
    attempt("own_comm", lambda: open("/proc/self/comm", "w").write("probe"))
    attempt("parent_environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())  # the harness's API keys
    attempt("own_environ", lambda: open("/proc/self/environ", "rb").read())
    attempt("cpuinfo", lambda: open("/proc/cpuinfo").read())
    attempt("dev_shm", lambda: open("/dev/shm/kb_sandbox_probe", "w").close())
    attempt("chmod_plain_inside", lambda: os.chmod(os.path.join(ok_dir, "a.txt"), 0o755))
    attempt("chmod_setuid_outside", lambda: os.chmod(os.path.join(out_dir, "keep.txt"), 0o4777))
    attempt("chown_outside", lambda: os.chown(os.path.join(out_dir, "keep.txt"), 1, 1))
    attempt("udp_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
    attempt("netlink_socket", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
    attempt("unix_dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close())
    attempt("unix_seqpacket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).close())  # CUDA's
    def unix_connect():  # a UNIX socket by path, like ssh-agent's
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(agent)
    attempt("unix_connect", unix_connect)
    attempt("socketpair", lambda: [x.close() for x in socket.socketpair()])
    attempt("read_outside", lambda: open(os.path.join(out_dir, "keep.txt")).read())
    import resource
    attempt("prlimit_parent", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_CORE, resource.prlimit(os.getppid(), resource.RLIMIT_CORE)))
    attempt("prlimit_self", lambda: resource.prlimit(0, resource.RLIMIT_CORE, resource.getrlimit(resource.RLIMIT_CORE)))
    def sysv_shm():  # IPC_PRIVATE, IPC_CREAT | 0600: a segment that would outlive the process
        if ctypes.CDLL(None).shmget(0, 4096, 0o1000 | 0o600) < 0:
            raise OSError("shmget refused")
    attempt("sysv_shm", sysv_shm)
    attempt("setuid_by_create", lambda: os.close(os.open(os.path.join(ok_dir, "s"), os.O_CREAT | os.O_WRONLY, 0o4755)))
    attempt("device_node", lambda: os.mknod(os.path.join(ok_dir, "kmsg"), 0o600 | 0o020000, os.makedev(1, 11)))
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    got["io_uring_setup"] = libc.syscall(425, 8, params)  # -1 when denied, a descriptor otherwise
    got["cap_eff"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
    print(json.dumps(got))
    """
)


def test_restrict_holds_python_native_code_threads_subprocesses_tcp_and_signals(tmp_path):
    ok_dir, out_dir = tmp_path / "ok", tmp_path / "out"
    ok_dir.mkdir()
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("keep")
    (out_dir / "keep.txt").chmod(0o644)
    listener = socket.create_server(("127.0.0.1", 0))
    agent = socket.socket(socket.AF_UNIX)  # where ssh-agent would listen
    agent.bind(str(tmp_path / "agent.sock"))
    agent.listen()
    accepted = []

    def accept(server):
        server.settimeout(20)
        try:
            accepted.append(server.accept())
        except OSError:  # the expected outcome: nobody connects
            pass

    for server in (listener, agent):
        threading.Thread(target=accept, args=(server,), daemon=True).start()
    try:
        port = listener.getsockname()[1]
        r = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), str(ok_dir), str(out_dir), str(port),
                            str(tmp_path / "agent.sock")], capture_output=True, text=True, timeout=120,
                           env={"TMPDIR": str(ok_dir), "PATH": "/usr/bin:/bin"})  # fmt: skip
    finally:
        listener.close()
        agent.close()
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["python_inside"] == got["native_inside"] == "done"
    for key in ("python_outside", "native_outside", "remove_outside", "thread_outside"):
        assert got[key] != "done", key
    assert got["shell_outside_rc"] != 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["keep.txt"]  # nothing written, nothing removed
    assert got["own_comm"] == "done"  # what the CUDA driver does
    assert got["own_environ"] == got["cpuinfo"] == "done"
    for key in ("parent_oom_score", "proc_sys", "dev_shm", "parent_environ"):
        assert got[key] != "done", key
    assert not Path("/dev/shm/kb_sandbox_probe").exists()
    if got["info"]["metadata"] != "not restricted":  # the seccomp filter (x86_64)
        for key in (
            "chmod_setuid_outside",
            "chown_outside",
            "udp_socket",
            "netlink_socket",
            "setuid_by_create",
            "unix_dgram",
            "unix_connect",
            "chmod_plain_inside",
            "read_outside",
            "sysv_shm",
            "prlimit_parent",
        ):
            assert got[key] != "done", key
        assert got["socketpair"] == got["unix_seqpacket"] == got["prlimit_self"] == "done"
        assert not [a for a in accepted if a[0].family == socket.AF_UNIX]
        assert got["io_uring_setup"] == -1 and int(got["cap_eff"], 16) == 0
        assert not (ok_dir / "s").exists()
        assert (out_dir / "keep.txt").stat().st_mode & 0o7777 == 0o644
    assert got["device_node"] != "done" and not (ok_dir / "kmsg").exists()
    if got["info"]["landlock_abi"] >= 4:
        assert got["tcp_connect"] != "done" and not accepted
    if got["info"]["landlock_abi"] >= 6:
        assert got["signal_parent"] != "done"


def native_write(target: Path) -> str:
    """The honest Triton ReLU candidate, plus a torch.save (C++ file writer: no Python audit event) to `target`."""
    src = (ROOT / "tests" / "candidates" / "triton_relu.py").read_text()
    assert src.rstrip().endswith("return y")
    return src.rstrip()[: -len("return y")] + f"torch.save(y, {str(target)!r})\n        return y\n"


def test_strict_evaluation_runs_sandboxed_and_a_native_write_outside_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    target = tmp_path / "answers.pt"
    src = native_write(target)
    r = evaluate(
        resolve_one("toy/relu"), src, EvalSettings(device="cpu", correctness_trials=1, timed_trials=2)
    )
    assert r.status == Status.RUNTIME_ERROR, r.message
    assert "strict mode's sandbox: files may be written only in" in r.message
    assert not target.exists()
    assert r.strict["sandbox"]["landlock_abi"] >= 1


@pytest.mark.slow
def test_parity_mode_and_sandbox_false_let_the_native_write_through(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    target = tmp_path / "answers.pt"
    src = native_write(target)
    # parity mode follows KernelBench, which has no sandbox; sandbox=False turns it off in strict mode
    for settings in (EvalSettings(device="cpu", strict=False, correctness_trials=1, timed_trials=2),
                     EvalSettings(device="cpu", sandbox=False, correctness_trials=1, timed_trials=2)):  # fmt: skip
        r = evaluate(resolve_one("toy/relu"), src, settings)
        assert target.exists(), r.message
        target.unlink()


@pytest.mark.slow
def test_eval_no_sandbox_flag_reaches_the_child(tmp_path, monkeypatch):
    from kb_agent.agent.cli import app
    from typer.testing import CliRunner

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    target = tmp_path / "answers.pt"
    cand = tmp_path / "cand.py"
    cand.write_text(native_write(target))
    args = ["eval", str(cand), "-p", "toy/relu", "--device", "cpu", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and json.loads(r.output)["status"] == "runtime_error" and not target.exists()
    r = CliRunner().invoke(app, [*args, "--no-sandbox"])
    assert r.exit_code == 0 and target.exists(), r.output


def test_choose_profile_probes_once_and_falls_back_to_wide_where_cuda_fails(tmp_path):
    import torch
    from kb_agent.evaluator.sandbox import choose_profile

    first = choose_profile([str(tmp_path)], tmp_path)
    assert first == ("wide" if not torch.cuda.is_available() else first)
    cache = tmp_path / "kb-agent-sandbox-profile.json"
    known = json.loads(cache.read_text())
    assert list(known.values()) == [first]
    cache.write_text(json.dumps({k: "narrow" for k in known}))  # remembered: no second probe
    assert choose_profile([str(tmp_path)], tmp_path) == "narrow"


@pytest.mark.slow
def test_a_denied_write_at_import_says_what_the_sandbox_allows(tmp_path):
    target = tmp_path / "my_ext_build"
    src = (
        f"import os\nos.makedirs({str(target)!r})\n"
        + (ROOT / "tests" / "candidates" / "triton_relu.py").read_text()
    )
    r = evaluate(
        resolve_one("toy/relu"), src, EvalSettings(device="cpu", correctness_trials=1, timed_trials=2)
    )
    assert r.status == Status.COMPILE_ERROR and "PermissionError" in r.message, r.message
    assert "files may be written only in the working directory, $TMPDIR and the build cache" in r.message
    assert not target.exists()


POISONER = """
import glob, os
root = os.path.dirname(os.environ["TORCH_EXTENSIONS_DIR"])  # the build cache, above this candidate's folder
for path in glob.glob(root + "/*/*/*.so") + glob.glob(root + "/*/triton_cache/*/*"):
    try:
        with open(path, "r+b") as f:
            f.write(b"poison")  # what a later candidate built from another source would load
    except OSError:
        pass
for path in (root + "/planted.so", *[d + "/planted.so" for d in glob.glob(root + "/*/*/")]):
    try:
        open(path, "w").close()
    except OSError:
        pass
"""


@pytest.mark.slow
def test_a_candidate_cannot_poison_the_builds_of_other_sources(tmp_path, monkeypatch):
    """Found by a new-user pass: one shared build cache, writable by every candidate, let a candidate
    overwrite another source's extension (an honest C++ candidate then scored incorrect). Each source now
    has its own folder, and the sandbox lets an evaluation write only its own."""
    from kb_agent.evaluator.runner import candidate_build_root

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    honest = (ROOT / "tests" / "candidates" / "triton_relu.py").read_text()
    victim = candidate_build_root(honest)
    (victim / "relu_ext_0123").mkdir(parents=True)
    (victim / "triton_cache" / "abc").mkdir(parents=True)
    built = {victim / "relu_ext_0123" / "relu_ext_0123.so": b"\x7fELF honest build",
             victim / "triton_cache" / "abc" / "kernel.json": b'{"honest": true}'}  # fmt: skip
    for path, data in built.items():
        path.write_bytes(data)
    src = POISONER + honest
    settings = EvalSettings(device="cpu", correctness_trials=1, timed_trials=2)
    r = evaluate(resolve_one("toy/relu"), src, settings)
    assert r.strict["sandbox"]["landlock_abi"] >= 1, r.message
    assert (
        candidate_build_root(src) != victim
        and str(candidate_build_root(src)) in r.strict["sandbox"]["writable"]
    )
    assert {path: path.read_bytes() for path in built} == built
    assert not list((tmp_path / "cache").rglob("planted.so"))
    # without the sandbox (parity mode) nothing stops it: the poison lands
    evaluate(
        resolve_one("toy/relu"),
        src,
        EvalSettings(device="cpu", strict=False, correctness_trials=1, timed_trials=2),
    )
    assert {path: path.read_bytes()[:6] for path in built} == {path: b"poison" for path in built}


def test_the_cuda_headers_for_the_compile_check_are_readable_in_the_sandbox(tmp_path):
    # helper-29: CUDA_HDR_DIR unpacked into /tmp, outside every readable root, failed every CUDA
    # candidate's compile check with "Tensor.h: Permission denied" (a compile_error)
    hdr, other = tmp_path / "hdr", tmp_path / "other"
    for d in (hdr, other):
        d.mkdir()
        (d / "Tensor.h").write_text("// a header\n")
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from kb_agent.evaluator.sandbox import restrict
        restrict([])
        for path in sys.argv[2:]:
            try:
                open(path).read()
                print(path, "read")
            except PermissionError:
                print(path, "denied")
        """
    )
    env = {**__import__("os").environ, "CUDA_HDR_DIR": str(hdr)}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT.parent), str(hdr / "Tensor.h"), str(other / "Tensor.h")],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert out.stdout.split("\n")[:2] == [f"{hdr / 'Tensor.h'} read", f"{other / 'Tensor.h'} denied"], (
        out.stderr
    )


def test_of_the_project_folder_only_the_packages_the_child_imports_are_readable():
    # helper-31: the project's folder was readable whole (it is on the child's import path), and with it
    # the user's .env.local, read with open() and torch.from_file
    code = textwrap.dedent(
        """
        import sys
        from kb_agent.evaluator.sandbox import restrict
        restrict([])
        for path in sys.argv[1:]:
            try:
                open(path).read(1)
                print("read")
            except PermissionError:
                print("denied")
        """
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    paths = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "evaluator" / "worker.py",
             ROOT / "problems" / "__init__.py", ROOT / "kb_agent" / "__init__.py"]  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True, env=env,
                         timeout=60)  # fmt: skip
    assert out.stdout.split() == ["denied", "denied", "read", "read", "read"], out.stderr
