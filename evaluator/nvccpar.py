"""nvcc with its host and device front ends at once: the same commands nvcc runs, in another order.

For one `.cu` compiled for one architecture, nvcc runs its steps one after another: the host
preprocessor, cudafe++ (the host front end, which also writes the module id), the device preprocessor,
cicc (the device front end, which reads that id), ptxas, fatbinary, then the host compiler on cudafe++'s
output, which includes the stub and fatbinary cicc and fatbinary wrote. With torch's headers in the
translation unit nearly all the time is the three front ends parsing them (measured on 2 cores, CUDA
13.0, a KernelBench-style candidate: host cpp 1.8 s, cudafe++ 16 s, device cpp 1.9 s, cicc 13 s, ptxas
0.1 s, host g++ 13.6 s). Only the module id ties the device chain to cudafe++, and cicc computes the same
id itself when asked (`--gen_module_id_file`), from the same source names. So here the device chain runs
beside the host chain, cicc writing its own id; the two ids are compared before the host compile, and
when they differ cicc and what follows it run again exactly as nvcc has them (the record says so).
Commands, inputs and outputs are nvcc's own (`nvcc --dryrun`), so the object is the one nvcc makes (the
name of its temporary file aside, which differs between any two nvcc runs too).

Used as the `nvcc` of a load_inline build (`python -m kb_agent.evaluator.nvccpar NVCC ARGS...`, see
`command`): anything but one `-c` compile of one `.cu` for one architecture in nvcc's usual sequence of
steps is handed to nvcc as it is. Each call leaves a record beside its output (`record_path`): `path`
("parallel", "parallel_rerun": the ids differed and the device chain ran again after cudafe++, or
"nvcc": nvcc itself) and `reason`. A dependency file asked for with the compile (torch's build file
passes `--generate-dependencies-with-compile --dependency-output OUT.d`, which nvcc writes in a step
of its own, `-- Filter Dependencies --`) is written by `nvcc -M` beside the two chains, with the same
target and contents. On unless KB_NVCC_PARALLEL=0 is in the environment. Checked on the CPU machine
(objects and dependency files identical to nvcc's) and on the H200 (2026-12-02, CUDA 13: objects
identical, nvcc of a KernelBench-style .cu 36.6 s -> 25.9 s and 35.9 s -> 22.6 s in
tests/bench/bench_nvccpar.py; both .cu of tests/evaluator/test_bindcache_gpu.py built on this path).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PARALLEL = "parallel"
RERUN = "parallel_rerun"
NVCC = "nvcc"


class Unplanned(Exception):
    """nvcc's steps for this call are not the sequence this module knows; nvcc runs as it is."""


def enabled() -> bool:
    """Whether load_inline builds run nvcc through this module: yes unless KB_NVCC_PARALLEL=0."""
    return os.environ.get("KB_NVCC_PARALLEL", "1") != "0"


def command(nvcc: str) -> str:
    """The ninja `nvcc = ...` value that runs `nvcc` through this module."""
    return shlex.join([sys.executable, "-m", "kb_agent.evaluator.nvccpar", nvcc])


def record_path(output: str | os.PathLike) -> Path:
    return Path(f"{output}.kbnvcc.json")


def _output(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a in ("-o", "--output-file") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--output-file="):
            return a.split("=", 1)[1]
    return None


_DEPS_WITH_COMPILE = ("--generate-dependencies-with-compile", "-MD")
_DEPS_OUTPUT = ("--dependency-output", "-MF")
_DEPS_OTHER = (
    "-M",
    "-MM",
    "-MMD",
    "-MT",
    "-MP",
    "--generate-dependencies",
    "--generate-nonsystem-dependencies",
    "--generate-nonsystem-dependencies-with-compile",
    "--dependency-target-name",
    "--generate-dependency-targets",
)


def _without_output(args: list[str]) -> list[str]:
    """`args` without `-c` and the object (`-o FILE`, `--output-file FILE`, `--output-file=FILE`)."""
    kept: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "--output-file"):
            skip = True
        elif a != "-c" and not a.startswith("--output-file="):
            kept.append(a)
    return kept


def split_dependencies(nvcc: str, args: list[str]) -> tuple[list[str], list[str] | None]:
    """`args` without the flags that ask the compile for a dependency file, and the `nvcc -M` command
    that writes that file as nvcc would (target: the object), or None when none is asked for. Raises
    Unplanned for a dependency option other than `--generate-dependencies-with-compile` / `-MD` with
    `--dependency-output FILE` / `-MF FILE`."""
    rest: list[str] = []
    with_compile, depfile = False, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in _DEPS_WITH_COMPILE:
            with_compile = True
        elif a in _DEPS_OUTPUT and i + 1 < len(args):
            depfile = args[i + 1]
            i += 1
        elif a in _DEPS_OTHER or a.split("=", 1)[0] in (*_DEPS_OUTPUT, *_DEPS_OTHER):
            raise Unplanned(f"dependency option {a}")
        else:
            rest.append(a)
        i += 1
    if not with_compile and depfile is None:
        return rest, None
    target = _output(rest)
    if not (with_compile and depfile and target):
        raise Unplanned("a dependency file without its compile, name or object")
    return rest, [
        nvcc,
        *_without_output(rest),
        "-M",
        "--dependency-target-name",
        target,
        "--dependency-output",
        depfile,
    ]


def plan(nvcc: str, args: list[str], tmp: Path) -> tuple[dict, list[str], list[str], list[str]]:
    """nvcc's steps for `args` (from `--dryrun`, temporary files in `tmp`): (environment, host chain,
    device chain with cicc writing its own id to `tmp`/kb_device.module_id, final host compile).
    Raises Unplanned for anything but the sequence the module doc describes."""
    if (
        "-c" not in args
        or "--dryrun" in args
        or any(a in ("-E", "-M", "-MM", "-ptx", "-cubin") for a in args)
    ):
        raise Unplanned("not a plain -c compile")
    env = {**os.environ, "TMPDIR": str(tmp)}
    dry = subprocess.run([nvcc, *args, "--dryrun"], capture_output=True, text=True, env=env, timeout=60)
    if dry.returncode != 0:
        raise Unplanned("nvcc --dryrun failed")
    steps: list[str] = []
    for line in dry.stderr.splitlines():
        if not line.startswith("#$ "):
            continue
        cmd = line[3:]
        m = re.match(r"^(\w+)=(.*)$", cmd)
        if m:  # nvcc's variables (PATH, CICC_PATH, ...), expanded as its shell would
            script = f'{m.group(1)}={m.group(2).strip()}\nprintf %s "${m.group(1)}"'
            out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
            env[m.group(1)] = out.stdout
        elif cmd.startswith("-"):  # a step of nvcc's own, such as "-- Filter Dependencies -- > FILE"
            raise Unplanned(f"nvcc step {cmd!r}")
        else:
            steps.append(cmd)
    tools = [os.path.basename(shlex.split(s)[0]) for s in steps]
    if tools.count("cudafe++") != 1 or tools.count("cicc") != 1 or tools[-1] not in ("gcc", "g++", "c++"):
        raise Unplanned(f"steps {tools}")
    fe, cc = tools.index("cudafe++"), tools.index("cicc")
    ids = [re.search(r'--module_id_file_name "?([^"\s]+)"?', steps[i]) for i in (fe, cc)]
    if not (fe < cc and "--gen_module_id_file" in steps[fe] and "--gen_module_id_file" not in steps[cc]
            and all(ids) and ids[0].group(1) == ids[1].group(1)):  # fmt: skip
        raise Unplanned("cudafe++ and cicc do not share the module id as expected")
    device = steps[fe + 1 : -1]
    if any(re.search(r"-D__CUDA_ARCH__=", s) is None for s in device if s.split()[0] in ("gcc", "g++")):
        raise Unplanned("a host step between cudafe++ and the host compile")
    own = str(tmp / "kb_device.module_id")
    i = cc - fe - 1
    device[i] = device[i].replace(ids[1].group(0), f'--gen_module_id_file --module_id_file_name "{own}"', 1)
    return env, steps[: fe + 1], device, [steps[-1]]


def _run(steps: list[str], env: dict, out: list, times: list | None = None) -> int:
    """Run steps in order, each's output appended to `out` and, with `times`, its tool and wall seconds
    appended there as `[tool, s]`; the first failure's status, else 0."""
    for cmd in steps:
        if cmd.startswith("rm "):  # nvcc removes its temporary files quietly, whether they are there or not
            for f in shlex.split(cmd)[1:]:
                Path(f).unlink(missing_ok=True)
            continue
        t0 = time.perf_counter()
        r = subprocess.run(["bash", "-c", cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if times is not None:
            times.append([os.path.basename(shlex.split(cmd)[0]), round(time.perf_counter() - t0, 3)])
        out.append(r.stdout)
        if r.returncode:
            return r.returncode
    return 0


def compile_parallel(nvcc: str, args: list[str]) -> tuple[int, bytes, dict]:
    """Compile as `nvcc args` would (module doc): (exit status, the tools' output in nvcc's order, record).
    A record of the parallel path holds `steps`: `plan_s` (nvcc --dryrun and its variables), then per
    chain (`host`, `device`, `final`) each tool's wall seconds in order, as `[tool, s]`."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kbnvcc.") as t:
        tmp = Path(t)
        try:
            args, deps = split_dependencies(nvcc, args)
            env, host, device, final = plan(nvcc, args, tmp)
        except (Unplanned, OSError, subprocess.SubprocessError, ValueError) as e:
            r = subprocess.run([nvcc, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            return r.returncode, r.stdout, {"path": NVCC, "reason": str(e)}
        host_out: list[bytes] = []
        dev_out: list[bytes] = []
        dev_rc = [0]
        steps: dict[str, list] = {"plan_s": round(time.perf_counter() - t0, 3), "host": [], "device": []}
        worker = threading.Thread(
            target=lambda: dev_rc.__setitem__(0, _run(device, env, dev_out, steps["device"]))
        )
        worker.start()
        dep_run = None
        if deps is not None:  # nvcc -M: its own preprocessor pass, beside the two chains
            dep_run = subprocess.Popen(deps, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        rc = _run(host, env, host_out, steps["host"])
        worker.join()
        if dep_run is not None:
            dep_out = dep_run.communicate()[0]
            if dep_run.returncode and not rc:
                return dep_run.returncode, b"".join([*host_out, dep_out]), {"path": PARALLEL, "reason": ""}
        if rc:  # nvcc stops at the host front end's failure: its output alone
            return rc, b"".join(host_out), {"path": PARALLEL, "reason": ""}
        record = {"path": PARALLEL, "reason": "", "steps": steps}
        try:
            same = Path(_stock_id(host[-1])).read_bytes() == (tmp / "kb_device.module_id").read_bytes()
        except OSError:
            same = False
        if not same:  # the device chain again, as nvcc runs it (after cudafe++)
            steps["device"] = []
            record = {
                "path": RERUN,
                "reason": "cicc's module id differed from cudafe++'s (or cicc wrote none)",
                "steps": steps,
            }
            dev_out = []
            dev_rc[0] = _run(_stock_device(device, host[-1], tmp), env, dev_out, steps["device"])
        if dev_rc[0]:
            return dev_rc[0], b"".join(host_out + dev_out), record
        out: list[bytes] = []
        steps["final"] = []
        rc = _run(final, env, out, steps["final"])
        return rc, b"".join(host_out + dev_out + out), record


def _stock_id(cudafe: str) -> str:
    return re.search(r'--module_id_file_name "?([^"\s]+)', cudafe).group(1)


def _stock_device(device: list[str], cudafe: str, tmp: Path) -> list[str]:
    """The device chain as nvcc has it: cicc reading cudafe++'s module id."""
    own = f'--gen_module_id_file --module_id_file_name "{tmp / "kb_device.module_id"}"'
    return [s.replace(own, f'--module_id_file_name "{_stock_id(cudafe)}"', 1) for s in device]


def main(argv: list[str]) -> int:
    nvcc, args = argv[0], argv[1:]
    t0 = time.perf_counter()
    if enabled():
        rc, out, record = compile_parallel(nvcc, args)
    else:
        r = subprocess.run([nvcc, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        rc, out, record = r.returncode, r.stdout, {"path": NVCC, "reason": "KB_NVCC_PARALLEL=0"}
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    target = _output(args)
    if target:
        record["seconds"] = round(time.perf_counter() - t0, 3)
        try:
            record_path(target).write_text(json.dumps(record))
        except OSError:
            pass
    return rc


def through(ninja: str) -> str:
    """A load_inline build file with its `nvcc = PATH` line running PATH through this module (when
    `enabled`; a value other than one path, a wrapper such as ccache, is left as it is)."""
    if not enabled():
        return ninja
    m = re.search(r"^nvcc = (\S+)[ \t]*$", ninja, re.M)
    if m is None:
        return ninja
    return ninja[: m.start()] + f"nvcc = {command(m.group(1))}" + ninja[m.end() :]


def records(build_dir: str | os.PathLike) -> list[dict]:
    """The records the compiles of one build folder left (`record_path`), each with its `object`."""
    out = []
    for p in sorted(Path(build_dir).glob("*.kbnvcc.json")):
        try:
            out.append({"object": p.name[: -len(".kbnvcc.json")], **json.loads(p.read_text())})
        except (OSError, ValueError):
            continue
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m kb_agent.evaluator.nvccpar NVCC ARGS...")
    sys.exit(main(sys.argv[1:]))
