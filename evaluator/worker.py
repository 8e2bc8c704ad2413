"""The evaluator's child process: `python -m evaluator.worker CHANNEL_FD JOB_FILE`.

Runs in a fresh process, its own process group, a private working directory and a scrubbed environment
(see `evaluator.runner`). It reports on the private channel (the inherited pipe `CHANNEL_FD`), one JSON
object per line:

    {"event": "stage", "name": "build"|"correctness"|"timing"}   a stage begins (the parent's clock)
    {"event": "<part>", ...}                                   a finished part of the EvalResult
    {"event": "done", "status": ..., "message": ...}            the verdict

Whatever the candidate prints goes to the stdout/stderr files the parent gave it, never to the channel.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import importlib.util
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from evaluator.result import CompileInfo, CorrectnessInfo, Status, TimingInfo
from evaluator.settings import EvalSettings

_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class Channel:
    def __init__(self, fd: int):
        self.f = os.fdopen(fd, "w", buffering=1, closefd=True)

    def send(self, event: str, **payload: Any) -> None:
        self.f.write(json.dumps({"event": event, **payload}, default=str) + "\n")
        self.f.flush()


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


def describe_exception(e: BaseException, candidate_file: str, limit: int = 1500) -> str:
    """`Type: message` plus the candidate's own frames (file line, function, code), innermost last."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == candidate_file]
    head = f"{type(e).__name__}: {e}".strip()
    if len(head) > limit:
        head = head[:limit] + " …"
    where = [f"  candidate line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames[-3:]]
    if isinstance(e, SyntaxError) and e.filename == candidate_file:
        where = [f"  candidate line {e.lineno}: {(e.text or '').strip()}"]
    return "\n".join([head, *where])


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
        self.dtype = getattr(torch, _DTYPES[self.settings.precision])
        self.atol, self.rtol = self.settings.tolerance
        self.candidate_file = str(self.workdir / "candidate.py")

    # -- helpers ------------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

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
        from evaluator.hardware import hardware_record

        hw = hardware_record(self.device, self.settings.precision)
        self.arch = hw.compute_capability or "9.0"
        if hw.arch_list:
            os.environ["TORCH_CUDA_ARCH_LIST"] = hw.arch_list
        self.chan.send("hardware", hardware=dataclasses.asdict(hw))
        try:
            self.build()
            self.check_correctness()
            self.time_and_profile()
            self.chan.send("done", status=str(Status.CORRECT), message="correct")
        except Verdict as v:
            self.chan.send("done", status=str(v.status), message=v.message)

    def build(self) -> None:
        from evaluator.build import BuildError, CudaUnavailable, LoadInlineWrapper, detect_backend

        self.chan.send("stage", name="build")
        ref_path = self.workdir / "reference.py"
        ref_path.write_text(self.problem["code"])
        try:
            self.ref_mod = load_module(ref_path, "kb_reference")
        except Exception as e:
            raise Verdict(Status.RUNTIME_ERROR, "the reference program failed to import (not the candidate's fault): "
                          + describe_exception(e, str(ref_path))) from None  # fmt: skip
        backend = detect_backend(self.candidate_src)
        info = CompileInfo(backend=backend)
        wrapper = LoadInlineWrapper(
            self.build_root, self.arch, cuda_torch=self.torch.version.cuda is not None,
            salt=(self.torch.__version__, os.environ.get("TORCH_CUDA_ARCH_LIST"), sys.version),
        )  # fmt: skip
        wrapper.install()
        Path(self.candidate_file).write_text(self.candidate_src)
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
            verdict = Verdict(Status.COMPILE_ERROR, "compilation failed:\n" + "\n".join(e.errors or [e.log[-2000:]]))
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
            verdict = Verdict(Status.COMPILE_ERROR, "importing the candidate failed:\n"
                              + describe_exception(e, self.candidate_file))  # fmt: skip
        info.seconds = time.perf_counter() - t0
        info.ok = verdict is None
        self.chan.send("compile", compile=dataclasses.asdict(info), builds=wrapper.builds)
        if verdict:
            raise verdict
        self.construct_models()

    def construct_models(self) -> None:
        torch, seed = self.torch, self.settings.seed
        set_seed(seed)
        init = self.prepare(self.ref_mod.get_init_inputs())
        try:
            with torch.no_grad():
                set_seed(seed)
                self.ref_model = self.ref_mod.Model(*self.clone(init)).to(device=self.device, dtype=self.dtype)
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

    def runtime_verdict(self, e: BaseException, doing: str) -> Verdict:
        if _is_triton_compile_error(e):
            return Verdict(Status.COMPILE_ERROR, f"a Triton kernel failed to compile while {doing}:\n"
                           + describe_exception(e, self.candidate_file))  # fmt: skip
        what = "out of memory" if _is_oom(e) else "an exception"
        return Verdict(Status.RUNTIME_ERROR, f"{what} while {doing}:\n" + describe_exception(e, self.candidate_file))

    def check_correctness(self) -> None:
        from evaluator.compare import compare_outputs

        torch = self.torch
        self.chan.send("stage", name="correctness")
        t0 = time.perf_counter()
        info = CorrectnessInfo(trials=self.settings.correctness_trials, atol=self.atol, rtol=self.rtol,
                               seed=self.settings.seed)  # fmt: skip
        torch.manual_seed(self.settings.seed)  # trial seeds drawn as KernelBench draws them
        seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(self.settings.correctness_trials)]
        verdict = None
        for i, s in enumerate(seeds):
            set_seed(s)
            inputs = self.prepare(self.ref_mod.get_inputs())
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
        from evaluator import timing

        torch, st = self.torch, self.settings
        self.chan.send("stage", name="timing")
        t0 = time.perf_counter()
        set_seed(st.seed)
        inputs = self.prepare(self.ref_mod.get_inputs())
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
        except BaseException as e:  # noqa: BLE001
            raise self.runtime_verdict(e, "timing the candidate") from None
        info.speedup = info.reference.mean_ms / info.candidate.mean_ms
        info.seconds = time.perf_counter() - t0
        self.chan.send("timing", timing=dataclasses.asdict(info))
        if st.profile and self.device.type == "cuda":
            from evaluator.profile import profile_forward

            try:
                prof = profile_forward(self.new_model, new_in)
                self.chan.send("profile", profile=dataclasses.asdict(prof))
            except Exception as e:  # the profile is feedback, not a verdict
                self.chan.send("profile_error", message=f"{type(e).__name__}: {e}")


def main(argv: list[str]) -> None:
    faulthandler.enable()  # a segfault prints the Python stack to the captured stderr
    chan = Channel(int(argv[1]))
    job = json.loads(Path(argv[2]).read_text())
    chan.send("stage", name="setup")
    try:
        Evaluation(job, chan).run()
    except BaseException as e:  # noqa: BLE001 - the evaluator's own failure must still reach the parent
        chan.send("done", status=str(Status.RUNTIME_ERROR), message="evaluation failed: " + describe_exception(e, ""))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # candidates may leave non-daemon threads behind; do not wait for them
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
