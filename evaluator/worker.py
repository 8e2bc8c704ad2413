"""The evaluator's child process: `python -m kb_agent.evaluator.worker CHANNEL_FD JOB_FILE KEY_FD PARENT_PID`.

Runs in a fresh process, its own process group, a private working directory and a scrubbed environment
(see `evaluator.runner`). It reports on the private channel (the inherited pipe `CHANNEL_FD`), one signed
JSON object per line (see `Channel`):

    {"event": "stage", "name": "build"|"correctness"|"timing"}   a stage begins (the parent's clock)
    {"event": "<part>", ...}                                   a finished part of the EvalResult
    {"event": "done", "status": ..., "message": ...}            the verdict

Whatever the candidate prints goes to the stdout/stderr files the parent gave it, never to the channel.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import importlib.util
import itertools
import json
import os
import random
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kb_agent.evaluator.procs import die_with_parent, supervise
from kb_agent.evaluator.result import CHECK_FLAGS, CompileInfo, CorrectnessInfo, Status, TimingInfo
from kb_agent.evaluator.settings import EvalSettings

_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


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


class Verdict(Exception):
    """Ends the evaluation early with a status and a message for the model."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def set_seed(seed: int) -> None:
    """KernelBench's set_seed: torch (CPU and CUDA) and, for good measure, Python's random."""
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_MONITOR = None  # strict mode's SideEffectMonitor, once armed


def describe_exception(
    e: BaseException, source_file: str, limit: int = 1500, label: str = "candidate"
) -> str:
    """`Type: message` plus the frames in `source_file` ("<label> line N, in function: code"),
    innermost last."""
    if _MONITOR is not None:
        with _MONITOR.paused():  # reading a traceback touches frames, which candidates may not
            return _describe_exception(e, source_file, limit, label)
    return _describe_exception(e, source_file, limit, label)


def _describe_exception(e: BaseException, source_file: str, limit: int, label: str) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == source_file]
    head = f"{type(e).__name__}: {e}".strip()
    if len(head) > limit:
        head = head[:limit] + " …"
    where = [f"  {label} line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames[-3:]]
    if isinstance(e, SyntaxError) and e.filename == source_file:
        where = [f"  {label} line {e.lineno}: {(e.text or '').strip()}"]
    return "\n".join([head, *where])


# how a call the sandbox refused shows in exception text: EACCES/EPERM from Python, or from C++ (torch)
_DENIED = re.compile(r"permission denied|operation not permitted|errno 1[^0-9]|errno 13|strerror: perm", re.I)


def _sandbox_held(record: dict | None) -> bool:
    """Whether `confine`'s record says the sandbox was applied (not off, not unavailable)."""
    return "landlock_abi" in (record or {})


def _is_triton_compile_error(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"CompilationError", "CompileTimeAssertionFailure", "InterpreterError"})


def _is_oom(e: BaseException) -> bool:
    return type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower()


class Evaluation:
    """One evaluation inside the child. `run()` walks the stages and sends each part as it finishes."""

    def __init__(self, job: dict, chan: Channel):
        import torch

        self.torch = torch
        self.chan = chan
        self.settings = EvalSettings.from_dict(job["settings"])
        self.problem = job["problem"]
        self.workdir = Path(job["workdir"])
        self.build_root = Path(job["build_root"])
        self.candidate_src = job["candidate"]
        self.device = torch.device(self.settings.device)
        if self.device.type == "cuda" and self.device.index is not None:
            # "cuda:N": make it the current device, where a candidate's device="cuda", .cuda(), Triton
            # launches and load_inline kernels go (they otherwise ran on cuda:0 against cuda:N memory)
            torch.cuda.set_device(self.device)
        self.dtype = getattr(torch, _DTYPES[self.settings.precision])
        self.atol, self.rtol = self.settings.tolerance
        self.candidate_file = str(self.workdir / "candidate.py")
        from kb_agent.evaluator.strict import Checks

        self.strict = self.settings.strict
        self.checks = Checks()
        self.strict_info: dict[str, Any] = {"sandbox": job["sandbox"]} if job.get("sandbox") else {}
        self.guard = None
        self.monitor = None
        self.threads_before: set = set()

    # -- helpers ------------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def draw_inputs(self) -> list:
        """The reference's `get_inputs()` (after the caller's seed), on the device in the precision.

        With `settings.inputs_on_device` the factory calls inside `get_inputs()` allocate on the device
        (`with torch.device(...)`): the same seeds and distributions as KernelBench, drawn by the device's
        generator, which is seconds faster per trial for the large level-1 inputs; the values differ from
        KernelBench's CPU draws. A `get_inputs()` that fails that way is drawn on the CPU and moved, as
        KernelBench does (also what `inputs_on_device=False` always does).
        """
        if self.settings.inputs_on_device and self.device.type == "cuda":
            state = self.torch.random.get_rng_state(), self.torch.cuda.get_rng_state_all()
            try:
                with self.torch.device(self.device):
                    return self.prepare(self.ref_mod.get_inputs())
            except Exception:  # noqa: BLE001 - retried on the CPU from the same generator state
                self.torch.random.set_rng_state(state[0])
                self.torch.cuda.set_rng_state_all(state[1])
        return self.prepare(self.ref_mod.get_inputs())

    def prepare(self, values: list) -> list:
        """Move tensors to the device; cast floating-point ones (only) to the precision."""
        out = []
        for v in values:
            if isinstance(v, self.torch.Tensor):
                v = v.to(self.device)
                if v.is_floating_point():
                    v = v.to(self.dtype)
            out.append(v)
        return out

    def clone(self, values: list) -> list:
        return [v.clone() if isinstance(v, self.torch.Tensor) else v for v in values]

    # -- stages -------------------------------------------------------------------------------------
    def run(self) -> None:
        from kb_agent.evaluator.hardware import hardware_record

        hw = hardware_record(self.device, self.settings.precision)
        self.arch = hw.compute_capability or "9.0"
        if hw.arch_list:
            os.environ["TORCH_CUDA_ARCH_LIST"] = hw.arch_list
        self.chan.send("hardware", hardware=dataclasses.asdict(hw))
        # bound before any candidate code runs: patching the classes later does not change what runs here
        send, strict_verdict = self.chan.send, self.strict_verdict
        try:
            self.build()
            self.check_correctness()
            if self.strict:
                self.strict_trials()
            self.time_and_profile()
            status, message = Status.CORRECT, "correct"
        except Verdict as v:
            status, message = v.status, v.message
        if self.strict:
            status, message = strict_verdict(status, message)
        send("done", status=str(status), message=message)

    def strict_verdict(self, status: Status, message: str) -> tuple[Status, str]:
        """Fold the strict checks into the verdict: a parity-correct candidate that broke a rule is rejected."""
        from kb_agent.evaluator.strict import live_threads

        checks = self.checks
        if self.monitor is not None:
            self.monitor.active = False
            checks.record(
                "side_effects", not self.monitor.events, "; ".join(dict.fromkeys(self.monitor.events))
            )
        if self.guard is not None:
            changed = self.guard_changed()
            checks.record("tampering", not changed, "replaced " + ", ".join(changed[:8]) if changed else "")
        threads = live_threads(self.threads_before)
        checks.record(
            "threads", not threads, f"left threads running: {', '.join(threads)}" if threads else ""
        )
        record = {"enabled": True, "parity_status": str(status), "checks": checks.checks, **self.strict_info}
        broke_rule = bool(
            self.monitor is not None and self.monitor.events
        )  # a blocked attempt, whatever followed
        if checks.failures and (status == Status.CORRECT or broke_rule):
            status = Status.REJECTED
            message = "rejected by strict mode:\n" + "\n".join(f"- {f}" for f in checks.failures)
        record["status"] = str(status)
        self.chan.send("strict", strict=record)
        return status, message

    def build(self) -> None:
        from kb_agent.evaluator.build import BuildError, CudaUnavailable, LoadInlineWrapper, detect_backend

        self.chan.send("stage", name="build")
        ref_path = self.workdir / "reference.py"
        ref_path.write_text(self.problem["code"])
        try:
            self.ref_mod = load_module(ref_path, "kb_reference")
        except Exception as e:
            raise Verdict(Status.RUNTIME_ERROR, "the reference program failed to import (not the candidate's fault): "
                          + describe_exception(e, str(ref_path), label="reference")) from None  # fmt: skip
        backend = detect_backend(self.candidate_src)
        info = CompileInfo(backend=backend)
        if self.strict and self.settings.backend != "auto":  # a study of CUDA kernels scores CUDA kernels
            self.checks.record("requested_backend", backend == self.settings.backend,
                               f"{self.settings.backend} kernels were asked for; this candidate's are {backend}")  # fmt: skip
        wrapper = LoadInlineWrapper(
            self.build_root, self.arch, cuda_torch=self.torch.version.cuda is not None,
            salt=(self.torch.__version__, os.environ.get("TORCH_CUDA_ARCH_LIST"), sys.version),
        )  # fmt: skip
        wrapper.install()
        # the evaluator's own modules are imported (and bind what they use) before any candidate code runs
        import kb_agent.evaluator.compare
        import kb_agent.evaluator.profile
        import kb_agent.evaluator.strict
        import kb_agent.evaluator.timing  # noqa: F401

        Path(self.candidate_file).write_text(self.candidate_src)
        if self.strict:
            self.arm_strict_checks(backend)
            wrapper.monitor = self.monitor
        t0 = time.perf_counter()
        verdict = None
        try:
            cand = load_module(Path(self.candidate_file), "kb_candidate")
            self.ModelNew = getattr(cand, "ModelNew", None)
            if not isinstance(self.ModelNew, type):
                verdict = Verdict(Status.COMPILE_ERROR, "the candidate defines no class ModelNew; define "
                                  "`class ModelNew(nn.Module)` with the reference Model's __init__ and forward signature")  # fmt: skip
        except BuildError as e:
            info.errors, info.log = e.errors, e.log
            verdict = Verdict(
                Status.COMPILE_ERROR, "compilation failed:\n" + "\n".join(e.errors or [e.log[-2000:]])
            )
        except CudaUnavailable as e:
            info.ok = True
            info.seconds = time.perf_counter() - t0
            self.chan.send("compile", compile=dataclasses.asdict(info), builds=wrapper.builds)
            raise Verdict(Status.RUNTIME_ERROR, str(e)) from None
        except SyntaxError as e:
            info.errors = [f"candidate.py({e.lineno}): error: {e.msg}\n    > {(e.text or '').strip()}"]
            verdict = Verdict(Status.COMPILE_ERROR, "syntax error:\n" + info.errors[0])
        except BaseException as e:  # noqa: BLE001 - an import may raise anything, SystemExit included
            if _is_triton_compile_error(e):
                info.errors = [str(e)[:2000]]
            verdict = Verdict(Status.COMPILE_ERROR, "importing the candidate failed:\n" + self.explain(e))
        info.seconds = time.perf_counter() - t0
        info.ok = verdict is None
        self.chan.send("compile", compile=dataclasses.asdict(info), builds=wrapper.builds)
        if verdict:
            raise verdict
        self.construct_models()

    def arm_strict_checks(self, backend: str) -> None:
        """Snapshot what the evaluator relies on and start watching side effects, before the candidate's
        code first runs (its import)."""
        import threading

        from kb_agent.evaluator.strict import (
            SideEffectMonitor,
            TamperGuard,
            guarded_objects,
            static_findings,
            torch_ops,
        )

        # the profiler's first use imports torch._dynamo, which rewraps torch.manual_seed and friends: do
        # it now, so the snapshot below sees torch as the checks will leave it
        torch_ops(self.torch.relu, [self.torch.ones(2)])
        found = static_findings(self.candidate_src)
        self.checks.record("static", not found, "; ".join(found))
        self.checks.record("custom_kernel_source", backend != "torch",
                           "" if backend != "torch" else "no load_inline or Triton kernel in the source")  # fmt: skip
        self.threads_before = {t.ident for t in threading.enumerate()}
        roots = [self.workdir, self.build_root, os.environ.get("TRITON_CACHE_DIR", self.workdir),
                 os.environ.get("TMPDIR", self.workdir)]  # fmt: skip
        self.monitor = SideEffectMonitor([Path(r) for r in roots], candidate_dir=self.workdir)
        self.monitor.install()
        global _MONITOR
        _MONITOR = self.monitor
        own = {name: mod for name, mod in sys.modules.items()
               if name in ("__main__", "json", "kb_agent.evaluator.strict", "kb_agent.evaluator.compare", "kb_agent.evaluator.timing")}  # fmt: skip
        own.update({"Evaluation": Evaluation, "Channel": Channel, "Checks": type(self.checks),
                    "SideEffectMonitor": SideEffectMonitor, "TamperGuard": TamperGuard})  # fmt: skip
        self.guard = TamperGuard({**guarded_objects(self.torch, self.ref_mod), **own})
        self.guard_changed = self.guard.changed  # bound now, like the verdict above

    def poison_free_memory(self) -> None:
        """Fill the CUDA caching allocator's free blocks with NaN, so memory a candidate gets back from it
        holds no earlier result (the reference's output in particular)."""
        torch = self.torch
        if self.device.type != "cuda":
            return
        free = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        if free > 0:
            filler = torch.empty(free // 4, dtype=torch.float32, device=self.device)
            filler.fill_(float("nan"))
            del filler
        self.sync()

    def strict_trials(self) -> None:
        """Extra correctness trials: candidate first on poisoned memory with fresh inputs, then inputs
        outside the declared distribution; inputs must come back unchanged; outputs must be plain tensors
        of the reference's dtype within a relative error of the output's own scale."""
        from kb_agent.evaluator.compare import compare_outputs
        from kb_agent.evaluator.strict import alternative_inputs, exact_types, relative_error
        from kb_agent.evaluator.thresholds import MAX_RELATIVE_ERROR

        torch = self.torch
        seed = self.settings.seed + 1_000_003  # not one of the parity trials' seeds
        set_seed(seed)
        base = self.draw_inputs()
        self.check_not_pytorch(base)
        trials = itertools.chain(
            [("candidate_first", base)], alternative_inputs(base, torch)
        )  # one set alive
        max_rel = MAX_RELATIVE_ERROR[self.settings.precision]
        for name, inputs in trials:
            cand_in = self.clone(inputs)  # `inputs` itself only reaches the reference as a clone
            with torch.no_grad():
                self.poison_free_memory()
                try:
                    actual = self.new_model(*cand_in)
                    self.sync()
                except BaseException as e:  # noqa: BLE001
                    raise self.runtime_verdict(e, f"running the strict trial '{name}'") from None
                try:
                    expected = self.ref_model(*self.clone(inputs))
                    self.sync()
                except Exception:
                    continue  # the reference itself does not accept these inputs: no trial
            changed = [i for i, (a, b) in enumerate(zip(cand_in, inputs, strict=True))
                       if isinstance(a, torch.Tensor) and not torch.equal(a, b)]  # fmt: skip
            self.checks.record("inputs_unchanged", not changed, f"modified input(s) {changed} in place")
            if name != "candidate_first" and not all(
                torch.isfinite(t).all() for t in _tensors(expected) if t.is_floating_point()
            ):
                continue  # outside the problem's domain: the reference is not finite there
            bad_type = exact_types(expected, actual)
            self.checks.record("exact_type", bad_type is None, bad_type or "")
            r = compare_outputs(expected, actual, self.atol, self.rtol, trial=-1, seed=seed)
            rel = relative_error(expected, actual)
            # on the declared distribution the parity tolerance applies; off it, outputs grow with the
            # inputs while atol does not, so an honest kernel is judged by its error relative to the scale
            passed = (
                r.passed
                if name == "candidate_first"
                else (rel is None or rel <= max_rel) and r.problem != "shape"
            )
            self.checks.record(f"trial_{name}", passed,
                               f"wrong on {name} inputs: {r.problem}, {r.mismatched} of {r.numel} elements "
                               f"off, max abs diff {r.max_abs_diff}, relative error {rel}")  # fmt: skip
            self.checks.record("relative_error", rel is None or rel <= max_rel,
                               f"relative error {rel:.3g} on {name} inputs exceeds {max_rel:g} (an output that "
                               "ignores the input's scale, e.g. zeros or a constant?)" if rel is not None else "")  # fmt: skip
            if name == "candidate_first" and self.device.type == "cuda":
                self.record_speed_of_light_inputs(inputs, expected)
            del actual, expected, cand_in

    def check_not_pytorch(self, inputs: list) -> None:
        """The candidate must not compute the answer with the reference's own PyTorch ops."""
        from kb_agent.evaluator.strict import reference_ops_recomputed, torch_ops

        try:
            ref_ops = torch_ops(self.ref_model, self.clone(inputs))
            cand_ops = torch_ops(self.new_model, self.clone(inputs))
        except Exception as e:  # a profiler failure is no verdict on the candidate
            self.strict_info["torch_ops_error"] = f"{type(e).__name__}: {e}"
            return
        recomputed = reference_ops_recomputed(ref_ops, cand_ops)
        self.strict_info["candidate_torch_ops"] = sorted(cand_ops)
        self.checks.record("not_the_reference_ops", not recomputed,
                           f"calls the reference's own PyTorch ops ({', '.join(recomputed)}): the custom kernels "
                           "must do the work")  # fmt: skip

    def record_speed_of_light_inputs(self, inputs: list, expected: Any) -> None:
        from kb_agent.evaluator.strict import count_bytes, count_flops, measure_bandwidth, speed_of_light_ms

        try:
            nbytes = count_bytes(inputs) + count_bytes(expected)
            flops = count_flops(self.ref_model, self.clone(inputs))
            bw = measure_bandwidth(self.device)
            floor = speed_of_light_ms(nbytes, flops, bw, self.arch, self.settings.precision)
            self.strict_info["speed_of_light"] = {"bytes": nbytes, "flops": flops, "bandwidth_Bps": bw,
                                                  "floor_ms": floor}  # fmt: skip
        except Exception as e:  # the floor is a check, not a verdict: record why it is missing
            self.strict_info["speed_of_light"] = {"error": f"{type(e).__name__}: {e}"}

    def construct_models(self) -> None:
        torch, seed = self.torch, self.settings.seed
        set_seed(seed)
        init = self.prepare(self.ref_mod.get_init_inputs())
        try:
            with torch.no_grad():
                set_seed(seed)
                self.ref_model = self.ref_mod.Model(*self.clone(init)).to(
                    device=self.device, dtype=self.dtype
                )
        except Exception as e:
            raise Verdict(Status.RUNTIME_ERROR, "the reference Model failed to construct (not the candidate's "
                          "fault): " + describe_exception(e, "")) from None  # fmt: skip
        try:
            with torch.no_grad():
                set_seed(seed)
                self.new_model = self.ModelNew(*self.clone(init)).to(device=self.device, dtype=self.dtype)
            self.sync()
        except BaseException as e:  # noqa: BLE001
            raise self.runtime_verdict(e, "constructing ModelNew") from None

    def strict_timing(self, info, new_in: list, flusher) -> None:
        """Fresh input values per timed call; host clock with a device-wide sync beside the events; the
        last output checked against the reference on the same inputs."""
        from kb_agent.evaluator import timing
        from kb_agent.evaluator.compare import compare_outputs
        from kb_agent.evaluator.thresholds import REPLAY_FLOOR, STREAM_HOST_FACTOR, STREAM_HOST_SLACK_MS

        inputs = self.clone(new_in)
        events, host, out = timing.time_strict(self.new_model, inputs, trials=self.settings.strict_timed_trials,
                                               flusher=flusher, device=self.device)  # fmt: skip
        ev, wall = timing.stats(events), timing.stats(host)
        info.settings["strict"] = {
            "trials": len(events),
            "event_mean_ms": ev.mean_ms,
            "host_mean_ms": wall.mean_ms,
        }
        if self.device.type == "cuda":
            self.checks.record("timed_work_on_stream", wall.median_ms <= STREAM_HOST_FACTOR * ev.median_ms + STREAM_HOST_SLACK_MS,
                               f"the host waited {wall.median_ms:.3f} ms per call for the device but the timed "
                               f"stream saw {ev.median_ms:.3f} ms: work escaped to another stream or thread")  # fmt: skip
        # a replayed output costs next to nothing, in its every call (see thresholds.REPLAY_FLOOR)
        floor = REPLAY_FLOOR[self.device.type]
        repeated = info.candidate
        honest = repeated.median_ms >= floor * ev.median_ms or repeated.min_ms >= floor * ev.min_ms
        self.checks.record("no_replay", honest,
                           f"{repeated.median_ms:.4f} ms per call on repeated inputs but "
                           f"{ev.median_ms:.4f} ms on fresh values: outputs cached or replayed?")  # fmt: skip
        with self.torch.no_grad():
            expected = self.ref_model(*self.clone(inputs))
        r = compare_outputs(expected, out, self.atol, self.rtol, trial=-1, seed=-1)
        self.checks.record(
            "timing_outputs", r.passed, f"the output of the last timed call was wrong ({r.problem})"
        )

    def runtime_verdict(self, e: BaseException, doing: str) -> Verdict:
        if _is_triton_compile_error(e):
            return Verdict(Status.COMPILE_ERROR, f"a Triton kernel failed to compile while {doing}:\n"
                           + describe_exception(e, self.candidate_file))  # fmt: skip
        what = "out of memory" if _is_oom(e) else "an exception"
        return Verdict(Status.RUNTIME_ERROR, f"{what} while {doing}:\n" + self.explain(e))

    def explain(self, e: BaseException) -> str:
        """`describe_exception` for the candidate, plus what the sandbox allows when it refused the call."""
        text = describe_exception(e, self.candidate_file)
        if _sandbox_held(self.strict_info.get("sandbox")) and _DENIED.search(text):
            text += ("\n  (strict mode's sandbox: files may be written only in the working directory, $TMPDIR and "
                     "the build cache; no network, no signals to other processes)")  # fmt: skip
        return text

    def check_correctness(self) -> None:
        from kb_agent.evaluator.compare import compare_outputs

        torch = self.torch
        self.chan.send("stage", name="correctness")
        t0 = time.perf_counter()
        info = CorrectnessInfo(trials=self.settings.correctness_trials, atol=self.atol, rtol=self.rtol,
                               seed=self.settings.seed)  # fmt: skip
        torch.manual_seed(self.settings.seed)  # trial seeds drawn as KernelBench draws them
        seeds = [
            int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(self.settings.correctness_trials)
        ]
        verdict = None
        for i, s in enumerate(seeds):
            set_seed(s)
            inputs = self.draw_inputs()
            with torch.no_grad():
                try:
                    set_seed(s)
                    expected = self.ref_model(*self.clone(inputs))
                    self.sync()
                except Exception as e:
                    raise Verdict(Status.RUNTIME_ERROR, "the reference failed on its own inputs (not the "
                                  "candidate's fault): " + describe_exception(e, "")) from None  # fmt: skip
                try:
                    set_seed(s)
                    actual = self.new_model(*self.clone(inputs))
                    self.sync()
                except BaseException as e:  # noqa: BLE001
                    verdict = self.runtime_verdict(e, f"running correctness trial {i + 1}")
                    break
            r = compare_outputs(expected, actual, self.atol, self.rtol, i, s)
            info.results.append(r)
            if not r.passed:
                verdict = Verdict(Status.INCORRECT, f"output mismatch in correctness trial {i + 1} of "
                                  f"{len(seeds)} ({r.problem})")  # fmt: skip
                break
            info.passed += 1
        info.seconds = time.perf_counter() - t0
        self.chan.send("correctness", correctness=dataclasses.asdict(info))
        if verdict:
            raise verdict

    def time_and_profile(self) -> None:
        from kb_agent.evaluator import timing

        torch, st = self.torch, self.settings
        self.chan.send("stage", name="timing")
        t0 = time.perf_counter()
        set_seed(st.seed)
        inputs = self.draw_inputs()
        ref_in, new_in = self.clone(inputs), self.clone(inputs)
        info = TimingInfo(settings={"warmup": st.warmup, "discard": st.discard, "trials": st.timed_trials,
                                    "flush_l2": st.flush_l2})  # fmt: skip
        try:
            if self.device.type == "cuda":
                flusher = timing.L2Flusher(self.device, st.flush_l2)
                info.method = timing.PARITY_METHOD
                info.settings["l2_flush_bytes"] = flusher.nbytes
                kw = dict(warmup=st.warmup, discard=st.discard, trials=st.timed_trials, flusher=flusher)
                info.reference = timing.stats(timing.time_parity(self.ref_model, ref_in, **kw))
                info.candidate = timing.stats(timing.time_parity(self.new_model, new_in, **kw))
                if st.device_timing:
                    method, times = timing.time_device(
                        {"reference": (self.ref_model, ref_in), "candidate": (self.new_model, new_in)},
                        warmup=st.warmup, trials=st.timed_trials, flusher=flusher, atol=self.atol, rtol=self.rtol,
                    )  # fmt: skip
                    info.device_method = method
                    info.device_reference = timing.stats(times["reference"])
                    info.device_candidate = timing.stats(times["candidate"])
                    info.device_speedup = info.device_reference.median_ms / info.device_candidate.median_ms
                if st.baseline_compile:
                    compiled = torch.compile(self.ref_model)
                    info.compile_reference = timing.stats(timing.time_parity(compiled, ref_in, **kw))
                    info.compile_speedup = info.compile_reference.mean_ms / info.candidate.mean_ms
            else:
                info.method = timing.CPU_METHOD
                kw = dict(warmup=min(st.warmup, 1), trials=max(1, min(st.timed_trials, 5)))
                info.settings.update(kw, flush_l2=False)
                info.reference = timing.stats(timing.time_cpu(self.ref_model, ref_in, **kw))
                info.candidate = timing.stats(timing.time_cpu(self.new_model, new_in, **kw))
            if self.strict:
                self.strict_timing(info, new_in, flusher if self.device.type == "cuda" else None)
        except BaseException as e:  # noqa: BLE001
            raise self.runtime_verdict(e, "timing the candidate") from None
        info.speedup = info.reference.mean_ms / info.candidate.mean_ms
        info.seconds = time.perf_counter() - t0
        self.chan.send("timing", timing=dataclasses.asdict(info))
        if st.profile and self.device.type == "cuda":
            from kb_agent.evaluator.profile import profile_forward
            from kb_agent.evaluator.thresholds import MIN_CUSTOM_SHARE

            try:
                prof = profile_forward(self.new_model, new_in)
                self.chan.send("profile", profile=dataclasses.asdict(prof))
                share = prof.custom_share or 0.0
                self.strict_info["custom_share"] = share
                self.checks.record("custom_kernels_do_the_work", bool(prof.custom_kernel_ran) and share >= MIN_CUSTOM_SHARE,
                                   f"custom kernels took {share:.0%} of the GPU time of one forward (at least "
                                   f"{MIN_CUSTOM_SHARE:.0%} needed; the rest ran in PyTorch/library kernels)")  # fmt: skip
            except Exception as e:  # the profile is feedback, not a verdict
                self.chan.send("profile_error", message=f"{type(e).__name__}: {e}")
        sol = self.strict_info.get("speed_of_light", {})
        if self.strict and sol.get("floor_ms") and info.candidate:
            best = min(
                info.candidate.min_ms,
                info.device_candidate.median_ms if info.device_candidate else float("inf"),
            )
            from kb_agent.evaluator.thresholds import SOL_SLACK

            sol["candidate_ms"] = best
            sol["fraction"] = sol["floor_ms"] / best if best > 0 else None
            self.checks.record("speed_of_light", best >= SOL_SLACK * sol["floor_ms"],
                               f"{best:.4f} ms is faster than physically possible ({sol['floor_ms']:.4f} ms to move "
                               f"{sol['bytes']} bytes and do {sol['flops']} FLOPs)")  # fmt: skip


def check_problem(ev: Evaluation) -> None:
    """Flag a degenerate reference: it fails under the evaluator's input handling, it does not match
    itself (two instances built with the same seed, called one after the other on the same inputs, so
    dropout or other random draws show), its output holds NaN (nothing can match it), or a zero or
    constant output would pass its correctness check at the tolerance on every trial (the constant is
    the mean of the first trial's output, kept for all trials, so a scalar output that varies with the
    inputs is not flagged by its own value). Sends a "problem_check" part, then the verdict."""
    from kb_agent.evaluator.compare import compare_outputs

    torch, chan = ev.torch, ev.chan
    found = {"reference_fails": None, "nondeterministic": False, "nonfinite_output": False, "zeros_pass": True,
             "constant_pass": True, "details": []}  # fmt: skip
    chan.send("stage", name="build")
    try:
        ref_path = ev.workdir / "reference.py"
        ref_path.write_text(ev.problem["code"])
        ev.ref_mod = load_module(ref_path, "kb_reference")
        set_seed(ev.settings.seed)
        init = ev.prepare(ev.ref_mod.get_init_inputs())
        models = []
        for _ in range(2):
            set_seed(ev.settings.seed)
            models.append(ev.ref_mod.Model(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype))
        chan.send("stage", name="correctness")
        torch.manual_seed(ev.settings.seed)
        seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(ev.settings.correctness_trials)]
        for i, s in enumerate(seeds):
            set_seed(s)
            inputs = ev.draw_inputs()
            with torch.no_grad():
                set_seed(s)
                first = models[0](*ev.clone(inputs))
                second = models[1](
                    *ev.clone(inputs)
                )  # no reseed: a reference that draws random numbers differs
                ev.sync()
            differ = _runs_differ(first, second, ev.atol, ev.rtol)
            if differ:
                found["nondeterministic"] = True
                found["details"].append(f"trial {i + 1}: two runs differ ({differ})")
            outs = [t for t in _tensors(first) if t.is_floating_point()]
            nans = sum(int(torch.isnan(t).sum()) for t in outs)
            if nans and not found.get("nonfinite_output"):  # (equal infinities do match: Inf is no flag)
                found["nonfinite_output"] = True  # NaN never passes allclose: no candidate can be correct
                found["details"].append(f"trial {i + 1}: {nans} NaN elements in the reference's output")
            zeros = [torch.zeros((), dtype=t.dtype, device=t.device).expand_as(t) for t in outs]  # no storage
            if i == 0:  # one constant per output, fixed across trials: it must not know the trial's answer
                const_values = [t.float().mean().item() for t in outs]
            consts = [
                torch.full((), v, dtype=t.dtype, device=t.device).expand_as(t)
                for v, t in zip(const_values, outs, strict=False)
            ]
            found["zeros_pass"] &= bool(outs) and compare_outputs(outs, zeros, ev.atol, ev.rtol, i, s).passed
            found["constant_pass"] &= (
                bool(outs) and compare_outputs(outs, consts, ev.atol, ev.rtol, i, s).passed
            )
            del first, second, outs, zeros, consts, inputs
    except BaseException as e:  # noqa: BLE001
        if _is_oom(e):  # the machine's limit, not the problem's: no finding to store
            chan.send(
                "done", status="error", message="out of memory (other jobs on this GPU?): " + str(e)[:300]
            )
            return
        found["reference_fails"] = describe_exception(e, str(ev.workdir / "reference.py"), label="reference")
        found["zeros_pass"] = found["constant_pass"] = False  # nothing to judge them on
    flags = [k for k in CHECK_FLAGS if found.get(k)]
    found["flags"] = flags
    chan.send("problem_check", check=found)
    chan.send("done", status="flagged" if flags else "ok", message=", ".join(flags) or "ok")


def _runs_differ(first, second, atol: float, rtol: float) -> str:
    """ "" when two runs of the reference agree (allclose's test, NaN matching NaN in the same place, so a
    reference that always outputs NaN is not called nondeterministic), else how they differ."""
    import torch
    from kb_agent.evaluator.compare import flat_chunks, flatten_outputs

    a, b = flatten_outputs(first), flatten_outputs(second)
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, torch.Tensor):
            if x != y:
                return f"{x!r} then {y!r}"
            continue
        off = 0
        for _, xc, yc in flat_chunks(x, y):
            if x.is_floating_point():
                off += int((~torch.isclose(xc, yc, rtol=rtol, atol=atol, equal_nan=True)).sum())
            else:
                off += int((xc != yc).sum())
        if off:
            return f"{off} of {x.numel()} elements"
    return ""


def _tensors(values) -> list:
    import torch
    from kb_agent.evaluator.compare import flatten_outputs

    return [v for v in flatten_outputs(values) if isinstance(v, torch.Tensor)]


def confine(job: dict) -> dict | None:
    """Strict mode's OS sandbox (evaluator.sandbox) for an evaluation child: what holds, or why nothing
    does; None when it is not asked for (parity mode, problem checks, `sandbox=False`)."""
    settings = job.get("settings") or {}
    if job.get("mode") == "check_problem" or not settings.get("strict", True):
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
    try:
        return restrict(writable, profile)
    except SandboxUnavailable as e:
        return {"unavailable": str(e)}


def main(argv: list[str]) -> None:
    die_with_parent(int(argv[4]))
    # what the candidate starts ends with the evaluation
    supervise(close_fds=(int(argv[1]), int(argv[3])), report_fd=int(argv[5]) if len(argv) > 5 else None)
    faulthandler.enable()  # a segfault prints the Python stack to the captured stderr
    chan = Channel(int(argv[1]), int(argv[3]))
    job_path = Path(argv[2])
    job = json.loads(job_path.read_text())
    job_path.unlink()  # nothing of the evaluator's for the candidate to read
    job["sandbox"] = confine(job)  # before torch is imported, so every thread the child has is confined
    chan.send("stage", name="setup")
    try:
        if job.get("mode") == "check_problem":
            from kb_agent.evaluator.hardware import hardware_record

            ev = Evaluation(job, chan)
            chan.send(
                "hardware", hardware=dataclasses.asdict(hardware_record(ev.device, ev.settings.precision))
            )
            check_problem(ev)
        else:
            Evaluation(job, chan).run()
    except BaseException as e:  # noqa: BLE001 - the evaluator's own failure must still reach the parent
        message = "evaluation failed: " + describe_exception(e, "")
        if _sandbox_held(job.get("sandbox")) and re.search(r"cudaGetDeviceCount|Error 304|cuInit", message):
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
