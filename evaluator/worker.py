"""The evaluator's child process: `python -m kb_agent.evaluator.worker CHANNEL_FD JOB_FILE KEY_FD PARENT_PID SWEEP_FD`.

Runs in a fresh process, its own process group, a private working directory and a scrubbed environment
(see `evaluator.runner`): spawned with that command line, or forked from the warm worker
(`evaluator.zygote`), which makes the forked process what a spawned one is and calls `main` with the
same argv. It reports on the private channel (the inherited pipe `CHANNEL_FD`), one signed
JSON object per line (see `Channel`):

    {"event": "stage", "name": "build"|"correctness"|"timing"}   a stage begins (the parent's clock)
    {"event": "<part>", ...}                                   a finished part of the EvalResult
    {"event": "strict", "strict": {...}}                        strict mode's facts (checks, parity status)
    {"event": "done", "status": ..., "message": ...}            the outcome KernelBench's rules give

A job's "mode" picks what runs: an evaluation (none), "check_problem", "baseline" (with "warmup": the
warm-up child, which only compiles), "build" (phase 1 of a split evaluation: the candidate imported, and
so built, with no GPU visible; `stages.build.prebuild`), or "ncu_profile" (the candidate's forwards under
Nsight Compute, `evaluator.ncu`; PARENT_PID is 0 there: ncu is the parent). A job may also name the CPUs
to run on ("cores") and variables to set ("env", after the sandbox is applied: the build child's
CUDA_VISIBLE_DEVICES="" and TORCH_CUDA_ARCH_LIST; a baseline's shared torch.compile cache folders).

The parent decides the status from these facts and the child's fate (`evaluator.judge`). The stages
themselves live in `evaluator.stages`, the evaluation's state in `evaluator.context`.

Whatever the candidate prints goes to the stdout/stderr files the parent gave it, never to the channel.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from kb_agent.evaluator.bindcache import cache_dir as bindcache_dir
from kb_agent.evaluator.context import Evaluation, describe_exception, sandbox_held
from kb_agent.evaluator.procs import die_with_parent, supervise
from kb_agent.evaluator.result import Status


class Channel:
    """The private result channel. Each line is `<hmac-sha256 hex> <json>`, signed with a per-evaluation
    key the parent sends on a separate pipe that is read and closed before any candidate code runs, so
    a candidate that writes to the channel's descriptor cannot forge a verdict. The key lives only in the
    closure of `_sign` (not an attribute), and the parent rejects any line that does not verify."""

    def __init__(self, fd: int, key_fd: int):
        with os.fdopen(key_fd, "rb") as f:
            self._sign = _signer(f.read())
        self.f = os.fdopen(fd, "w", buffering=1, closefd=True)
        self.seq = 0
        self._dumps = json.dumps  # bound now: a candidate that patches json.dumps later changes nothing here

    def send(self, event: str, **payload: Any) -> None:
        self.seq += 1
        body = self._dumps({"event": event, "seq": self.seq, **payload}, default=str)
        self.f.write(f"{self._sign(body.encode())} {body}\n")
        self.f.flush()


def _signer(key: bytes):
    import hashlib
    import hmac

    base = hmac.new(key, digestmod=hashlib.sha256)
    del key

    def sign(data: bytes) -> str:
        mac = base.copy()
        mac.update(data)
        return mac.hexdigest()

    return sign


def confine(job: dict) -> dict | None:
    """Strict mode's OS sandbox (evaluator.sandbox) for an evaluation child: what holds, or why nothing
    does; None when it is not asked for (parity mode, problem checks, `sandbox=False`)."""
    settings = job.get("settings") or {}
    if job.get("mode") in ("check_problem", "baseline") or not settings.get("strict", True):
        return None
    if not settings.get("sandbox", True):
        return {"unavailable": "turned off (sandbox=False / --no-sandbox)"}
    from kb_agent.evaluator.sandbox import SandboxUnavailable, choose_profile, landlock_abi, restrict

    writable = [w for w in (job["workdir"], job["build_root"], os.environ.get("TRITON_CACHE_DIR"),
                            os.environ.get("TMPDIR")) if w]  # fmt: skip
    # on a GPU, the narrow profile only where a probe saw CUDA, Triton and the profiler work under it
    gpu = str(settings.get("device", "cuda")).startswith("cuda") and landlock_abi() > 0
    # the probe's answer is kept at the build cache's root, where no evaluation may write (only in its own
    # candidate's folder); a candidate that could write it would downgrade later evaluations' sandbox
    cache = Path(job.get("sandbox_cache") or Path(job["build_root"]).parent)
    profile = choose_profile(writable, cache) if gpu else "narrow"
    # the binding-object cache (evaluator.bindcache): read, never written, by the child (the harness
    # publishes to it); made now, while the child may still create it
    bindings = bindcache_dir(cache)
    try:
        bindings.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    try:
        return restrict(writable, profile, readable=[bindings])
    except SandboxUnavailable as e:
        return {"unavailable": str(e)}


def pin(cores: list[int] | None) -> None:
    """Run this process on `cores` (the pool's slot: `evaluator.slots.Slot.cores`); None or a set the
    kernel refuses leaves it as it is. Where torch is already imported (a forked child), its thread
    pool is sized to them too."""
    if not cores:
        return
    try:
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError, ValueError):
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(len(cores))


def main(argv: list[str]) -> None:
    """The entry of both ways a child starts (module docstring): argv is [program, CHANNEL_FD, JOB_FILE,
    KEY_FD, PARENT_PID, SWEEP_FD (optional)]. Never returns: the process exits when the job is done."""
    die_with_parent(int(argv[4]) or os.getppid())  # 0: started under a wrapper (ncu), its parent
    # what the candidate starts ends with the evaluation
    supervise(close_fds=(int(argv[1]), int(argv[3])), report_fd=int(argv[5]) if len(argv) > 5 else None)
    faulthandler.enable()  # a segfault prints the Python stack to the captured stderr
    chan = Channel(int(argv[1]), int(argv[3]))
    job_path = Path(argv[2])
    job = json.loads(job_path.read_text())
    job_path.unlink()  # nothing of the evaluator's for the candidate to read
    pin(job.get("cores"))  # before torch starts a thread, so every thread and compiler inherits them
    job["sandbox"] = confine(job)  # before torch is imported, so every thread the child has is confined
    os.environ.update(job.get("env") or {})  # after confine: its probe child must see the GPU
    chan.send("stage", name="setup")
    try:
        if job.get("mode") == "check_problem":
            from kb_agent.evaluator.hardware import hardware_record
            from kb_agent.evaluator.stages import problem_check

            ev = Evaluation(job, chan)
            chan.send(
                "hardware", hardware=dataclasses.asdict(hardware_record(ev.device, ev.settings.precision))
            )
            problem_check.run(ev)
        elif job.get("mode") == "baseline":  # `kb-agent baseline`: the reference eager and compiled
            from kb_agent.evaluator.hardware import hardware_record
            from kb_agent.evaluator.stages import baseline

            ev = Evaluation(job, chan)
            chan.send(
                "hardware", hardware=dataclasses.asdict(hardware_record(ev.device, ev.settings.precision))
            )
            if job.get("compile_cache"):  # `kb-agent baseline --jobs`: the job's shared cache folder
                baseline.use_compile_caches()
            if job.get("warmup"):  # compile, time nothing
                baseline.warm(ev, job.get("compile_mode", "default"), job.get("compile_threads"))
            else:
                baseline.run(ev, job.get("compile_mode", "default"))
        elif job.get("mode") == "build":  # phase 1 of a split evaluation: import (and build), no GPU
            from kb_agent.evaluator.hardware import hardware_record
            from kb_agent.evaluator.stages import build

            ev = Evaluation(job, chan, device="cpu")
            chan.send(
                "hardware", hardware=dataclasses.asdict(hardware_record(ev.device, ev.settings.precision))
            )
            build.prebuild(ev, job["arch"])
        elif job.get("mode") == "ncu_profile":  # Nsight Compute's pass over a correct candidate
            from kb_agent.evaluator.stages import ncu_profile

            ncu_profile.run(Evaluation(job, chan), job.get("warmup", 2), job.get("forwards", 1))
        else:
            Evaluation(job, chan).run()
    except BaseException as e:  # noqa: BLE001 - the evaluator's own failure must still reach the parent
        message = "evaluation failed: " + describe_exception(e, "")
        if sandbox_held(job.get("sandbox")) and re.search(r"cudaGetDeviceCount|Error 304|cuInit", message):
            message += ("\n  (strict mode's sandbox was on; if CUDA cannot start under it on this machine, pass "
                        "--no-sandbox or EvalSettings(sandbox=False), and please report it)")  # fmt: skip
        chan.send("done", status=str(Status.RUNTIME_ERROR), message=message)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # candidates may leave non-daemon threads behind; do not wait for them
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
