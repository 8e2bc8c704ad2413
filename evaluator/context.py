"""One evaluation inside the child: its state, the helpers every stage uses, and the order of the stages.

`Evaluation.run()` walks the stages (`evaluator.stages`), each a function of the evaluation that records
what it found and sends each part of the EvalResult as it finishes, raising `Verdict` to end early with the
outcome KernelBench's rules give. It then sends the strict facts and that outcome; the status itself is
decided by `evaluator.judge` in the parent.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import random
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from kb_agent.evaluator.bindcache import cache_dir as bindcache_dir
from kb_agent.evaluator.result import Status
from kb_agent.evaluator.settings import EvalSettings

_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class Verdict(Exception):
    """Ends the evaluation early with a status and a message for the model."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# bound at import: the module's attribute is the candidate's to replace, and the harness seeds before
# every reference call it judges with (a `random.seed` of the candidate's that raised only there made
# the reference look as if it refused those values, and every judged call went unchecked: helper-27)
_seed_python = random.seed


def set_seed(seed: int) -> None:
    """KernelBench's set_seed: torch (CPU and CUDA) and, for good measure, Python's random."""
    import torch

    torch.manual_seed(seed)
    _seed_python(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def interference(ev) -> str:
    """What the candidate has left in place, now, that every later torch call of the harness (the
    reference, the comparison, the draws) would run through ("" for nothing): torch function or dispatch
    modes (between the candidate's calls the harness pushes none; a mode that zeroed `torch.sub` passed an
    all-zeros ReLU), its own kernels for the aten ops the harness uses (`strict.DispatchGuard`), global
    module hooks (`global_module_hooks`), torch's process-wide settings changed (`strict.process_settings`),
    signal handlers, timers and garbage-collector callbacks (`strict.interpreter_hooks`),
    the evaluation's own objects or the reference's state changed (`strict.PinnedState`), and threads it
    started still running."""
    from kb_agent.evaluator.strict import live_threads
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    torch = ev.torch
    found = []
    # torch.set_default_device's mode (a DeviceContext) only picks where factories allocate; honest
    # candidates set it; its class exactly: a subclass's own __torch_function__ slowed the reference's
    # relu 500x (helper-17, 2026-12-07)
    functions = [m for m in _get_current_function_mode_stack() if type(m) is not DeviceContext]
    if modes := len(functions) + torch._C._len_torch_dispatch_stack():
        found.append(
            f"{modes} torch function or dispatch mode(s) active ({', '.join(type(m).__name__ for m in functions)})"
        )
    if ev.dispatch_guard is not None and (ops := ev.dispatch_guard.changed()):
        found.append(f"kernels of its own for {', '.join(ops[:4])}")
    if hooks := global_module_hooks(torch):  # every nn.Module's call runs them, the reference's too
        found.append(f"global module hooks ({', '.join(hooks[:4])})")
    monitor, tampered = getattr(ev, "monitor", None), getattr(ev, "monitor_tampered", None)
    if monitor is not None and tampered is not None:  # switched off, it blocks nothing
        bad = tampered(monitor)
        if len(monitor.events) < ev.monitor_events_seen:
            bad.append("its record cut short")
        ev.monitor_events_seen = max(ev.monitor_events_seen, len(monitor.events))
        if bad:
            found.append(f"the side-effect monitor changed ({'; '.join(bad)})")
    if (before := getattr(ev, "settings_before", None)) is not None:
        from kb_agent.evaluator.strict import process_settings

        if changed := _changed(before, process_settings(torch), values=True):
            found.append(f"torch's process settings changed ({', '.join(changed[:4])})")
    if (before := getattr(ev, "hooks_before", None)) is not None:
        from kb_agent.evaluator.strict import interpreter_hooks

        # by name alone: the values are handler and callback objects, whose reprs the candidate writes
        if changed := _changed(before, interpreter_hooks(), values=False):
            found.append(f"interpreter hooks changed ({', '.join(changed)})")
    if (pinned := getattr(ev, "pinned", None)) is not None and (moved := pinned.moved(ev)):
        found.append(f"the evaluator's own objects changed ({', '.join(moved[:4])})")
    if (before := getattr(ev, "threads_before", None)) and (threads := live_threads(before)):
        # a thread of the candidate's alive between its calls runs beside the reference and the harness:
        # one waited for the timing stage's draw, then slowed one call of the reference by 2 s
        # (helper-19, 2026-12-07); `threads` held only those left at the end
        found.append(f"threads of its own running ({', '.join(threads[:4])})")
    return "; ".join(found)


def _changed(before: dict, now: dict, values: bool) -> list[str]:
    """The keys of `before` whose value differs in `now` (`values`: "key old -> new")."""
    return [f"{k} {before[k]!r} -> {now[k]!r}" if values else k for k in before if now[k] != before[k]]


def tampering_now(ev, shallow: bool = True) -> list[str]:
    """What the candidate has changed, now, of what the harness relies on: the tamper guard's objects
    (`strict.TamperGuard`, "replaced ..."; its shallow objects, every torch module, unless `shallow` is
    False) and what `interference` finds ("left ..."); [] for nothing."""
    guarded = getattr(ev, "guard", None) is not None
    found = [f"replaced {name}" for name in ev.guard_changed(shallow)] if guarded else []
    return found + ([f"left {left}"] if (left := interference(ev)) else [])


def record_tampering(ev, when: str, shallow: bool = True, every_op: bool = False) -> bool:
    """Fail `tampering` where `tampering_now` finds anything, its first eight findings followed by
    `when` ("after its import", ...); True where it did. Made after the candidate's import, its
    constructor and each of its checked calls (before the harness's own torch calls, the reference's and
    the comparison's, that would run through what it left), before each of strict timing's fresh
    draws, and once its code has stopped running."""
    found = tampering_now(ev, shallow)
    if (
        every_op
        and getattr(ev, "dispatch_guard", None) is not None
        and (ops := ev.dispatch_guard.changed_anywhere())
    ):
        found.append(f"left kernels of its own for {', '.join(ops[:4])}")
    if found:
        ev.checks.record("tampering", False, ", ".join(found[:8]) + f" ({when})")
    return bool(found)


def global_module_hooks(torch) -> list[str]:
    """The kinds of global `nn.Module` hooks registered now (`register_module_forward_hook` and its
    kin: `torch.nn.modules.module._global_*`); the harness registers none. A forward hook that replaced
    the reference's output, and a pre-hook that slowed its every call, passed every check."""
    from torch.nn.modules import module

    return [name for name, value in vars(module).items() if name.startswith("_global_") and value]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def describe_exception(
    e: BaseException, source_file: str, limit: int = 1500, label: str = "candidate"
) -> str:
    """`Type: message` plus the frames in `source_file` ("<label> line N, in function: code"),
    innermost last. (Strict mode's side-effect monitor lets this read a traceback's frames: its nearest
    caller outside the standard library is this module. The monitor used to be paused here, through a
    module global a candidate could reach too.)"""
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


def sandbox_held(record: dict | None) -> bool:
    """Whether `confine`'s record says the sandbox was applied (not off, not unavailable)."""
    return "landlock_abi" in (record or {})


def is_triton_compile_error(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"CompilationError", "CompileTimeAssertionFailure", "InterpreterError"})


def interpreter_lacks_libdevice(e: BaseException, source: str) -> bool:
    """Whether `e` is Triton's interpreter failing on a source that calls libdevice: its extern functions
    return None there (triton 3.6: "cannot convert None of type <class 'NoneType'> to tensor"), so a
    kernel that compiles on a GPU read as a compile error on the CPU (helper-26)."""
    return (
        os.environ.get("TRITON_INTERPRET") == "1"
        and any(c.__name__ == "InterpreterError" for c in type(e).__mro__)
        and "libdevice" in source
    )


def interpreter_lacks_bf16(e: BaseException) -> bool:
    """Whether `e` is Triton's interpreter failing on bfloat16 arithmetic (triton 3.6: "'InterpreterBuilder'
    object has no attribute 'get_bf16'"), which a GPU compiles (helper-32)."""
    return (
        os.environ.get("TRITON_INTERPRET") == "1"
        and any(c.__name__ == "InterpreterError" for c in type(e).__mro__)
        and "get_bf16" in str(e)
    )


# Triton's interpreter computes bfloat16 arithmetic wrongly where it does not raise (triton 3.6: a
# load, an add and a store of bf16 gave NaN and 1e32; helper-32): said beside an incorrect verdict there
INTERPRETER_BF16 = (
    "note: Triton's interpreter (Triton on the CPU, TRITON_INTERPRET=1) computes bfloat16 arithmetic "
    "wrongly, so this mismatch may be the interpreter's: evaluate bf16 Triton kernels on a GPU, or in fp16 or "
    "fp32 here"
)


def is_oom(e: BaseException) -> bool:
    """Out of memory: torch's OutOfMemoryError (CUDA), or the CPU allocator's failure, a RuntimeError
    ("DefaultCPUAllocator: can't allocate memory ... Error code 12", under an address-space limit the
    candidate set: helper-28)."""
    text = str(e).lower()
    return (
        type(e).__name__ == "OutOfMemoryError"
        or isinstance(e, MemoryError)
        or any(w in text for w in ("out of memory", "can't allocate memory", "cannot allocate memory"))
    )


class Evaluation:
    """One evaluation inside the child. `run()` walks the stages and sends each part as it finishes."""

    def __init__(self, job: dict, chan: Any, device: str | None = None):  # chan: worker.Channel
        """`device` overrides the settings' (the build child's "cpu": it must not touch the GPU)."""
        import torch

        self.torch = torch
        self.chan = chan
        self.settings = EvalSettings.from_dict(job["settings"])
        self.problem = job["problem"]
        self.workdir = Path(job["workdir"])
        self.build_root = Path(job["build_root"])
        # the binding-object cache (evaluator.bindcache) beside the candidates' build folders; none when
        # builds are not kept (reuse_builds off)
        cache = job.get("sandbox_cache")
        self.bind_root = bindcache_dir(cache) if cache and self.settings.reuse_builds else None
        self.candidate_src = job["candidate"]
        self.device = torch.device(device or self.settings.device)
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
        self.stage_peaks: dict[str, int] = {}  # device memory peak of each stage, bytes (`stage_peak`)
        self.guard = None
        self.dispatch_guard = None  # strict.DispatchGuard, made with `guard` (stages.build)
        self.monitor = None
        self.monitor_tampered = None  # SideEffectMonitor.tampered, bound when the monitor is installed
        self.monitor_events_seen = 0  # the most events its record held when last looked at
        self.pinned = None  # strict.PinnedState, made with the reference model (stages.build)
        self.settings_before = None  # strict.process_settings as the candidate's import found them
        self.hooks_before = None  # strict.interpreter_hooks likewise
        self.threads_before: set = set()
        self.reference_alone = None  # the reference's TimingStats before the candidate's import (strict)

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
        KernelBench does (also what `inputs_on_device=False` always does); but not one that ran out of
        device memory: that error is raised (a CPU draw then would hand this trial other values than the
        same seed gave before: `problems check` once called five stateless level-1 references
        `state_carried` that way, beside other checks on the GPU).

        Raises:
            torch.OutOfMemoryError (or the RuntimeError torch raises for it): the device's memory is full.
        """
        if self.settings.inputs_on_device and self.device.type == "cuda":
            state = self.torch.random.get_rng_state(), self.torch.cuda.get_rng_state_all()
            try:
                with self.torch.device(self.device):
                    return self.prepare(self.ref_mod.get_inputs())
            except Exception as e:  # noqa: BLE001 - retried on the CPU from the same generator state
                if is_oom(e):  # the device's memory, not get_inputs(): a CPU draw would give other values
                    raise
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
        """Each model's own copy of the inputs (`compare.clone_args`: tensors in lists and tuples too)."""
        from kb_agent.evaluator.compare import clone_args

        return clone_args(list(values))

    # -- the stages -------------------------------------------------------------------------------------
    def run(self) -> None:
        from kb_agent.evaluator.hardware import hardware_record
        from kb_agent.evaluator.stages import build, correctness, strict_trials, timing

        hw = hardware_record(self.device, self.settings.precision)
        self.arch = hw.compute_capability or "9.0"
        if hw.arch_list:
            os.environ["TORCH_CUDA_ARCH_LIST"] = hw.arch_list
        self.chan.send("hardware", hardware=dataclasses.asdict(hw))
        # bound before any candidate code runs: patching the classes later does not change what runs here
        send, strict_facts = self.chan.send, self.strict_facts
        try:
            build.run(self)
            self.stage_peak("build")
            correctness.run(self)
            self.stage_peak("correctness")
            if self.strict:
                strict_trials.run(self)
            timing.run(self)
            self.stage_peak("timing")
            status, message = Status.CORRECT, "correct"
        except Verdict as v:
            status, message = v.status, v.message
        if self.strict:
            send("strict", strict=strict_facts(status))
        send("done", status=str(status), message=message)

    def strict_facts(self, parity_status: Status) -> dict[str, Any]:
        """Strict mode's record, to be judged with the parity outcome by `evaluator.judge`: the checks
        the stages recorded, and those measured now that the candidate's code has stopped running (side
        effects the audit hook saw, tampering with what the evaluator relies on, threads left running)."""
        from kb_agent.evaluator.strict import live_threads

        checks = self.checks
        # tampering first: the monitor is still on, as the candidate must have left it
        tampered = (
            record_tampering(self, "after its last call", every_op=True) if self.guard is not None else None
        )
        if self.monitor is not None:
            self.monitor.active = False
            checks.record(
                "side_effects", not self.monitor.events, "; ".join(dict.fromkeys(self.monitor.events))
            )
        if tampered is False:
            checks.record("tampering", True)
        threads = live_threads(self.threads_before)
        checks.record(
            "threads", not threads, f"left threads running: {', '.join(threads)}" if threads else ""
        )
        return {
            "enabled": True,
            "parity_status": str(parity_status),
            # the most device memory the child's tensors held at once (torch's caching allocator), the
            # candidate's and the evaluator's together: what a GPU with less memory would run out of
            "peak_device_bytes": self.peak_device_bytes(),
            "peak_device_bytes_by_stage": self.stage_peaks,
            "checks": checks.checks,
            # a blocked attempt, whatever followed: the failure it met was of its own making
            "broke_rule": bool(self.monitor is not None and self.monitor.events),
            **self.strict_info,
        }

    def peak_device_bytes(self) -> int | None:
        """The most device memory the child's tensors held at once, in bytes (the largest of the stages'
        peaks and `torch.cuda.max_memory_allocated` since the last stage); None off CUDA."""
        cuda = self.torch.cuda
        if self.device.type != "cuda" or not cuda.is_initialized():
            return None
        try:
            now = int(cuda.max_memory_allocated(self.device))
        except Exception:  # noqa: BLE001 - a fact for the record, never a verdict
            return None
        return max([now, *self.stage_peaks.values()])

    def stage_peak(self, stage: str) -> None:
        """Record the device memory peak (bytes) of the stage that just ended in `stage_peaks`, and
        start the next stage's count (`torch.cuda.reset_peak_memory_stats`). Nothing off CUDA."""
        cuda = self.torch.cuda
        if self.device.type != "cuda" or not cuda.is_initialized():
            return
        try:
            self.stage_peaks[stage] = int(cuda.max_memory_allocated(self.device))
            cuda.reset_peak_memory_stats(self.device)
        except Exception:  # noqa: BLE001 - a fact for the record, never a verdict
            pass

    def runtime_verdict(self, e: BaseException, doing: str) -> Verdict:
        if interpreter_lacks_libdevice(e, self.candidate_src):
            return Verdict(Status.RUNTIME_ERROR, f"a Triton kernel calls libdevice, which Triton's interpreter (Triton "
                           "on the CPU, TRITON_INTERPRET=1) cannot run: evaluate it on a GPU, or use tl.math's "
                           f"functions (tl.erf, tl.exp, ...) to run it here; while {doing}:\n"
                           + describe_exception(e, self.candidate_file))  # fmt: skip
        if os.environ.get("TRITON_INTERPRET") == "1" and "active drivers" in str(e):  # helper-32
            return Verdict(Status.RUNTIME_ERROR, "Triton's autotuner (@triton.autotune) times its configurations "
                           "on a GPU, which Triton's interpreter (Triton on the CPU, TRITON_INTERPRET=1) has not: "
                           f"launch one configuration to run it here, or evaluate it on a GPU; while {doing}:\n"
                           + describe_exception(e, self.candidate_file))  # fmt: skip
        if interpreter_lacks_bf16(e):
            return Verdict(Status.RUNTIME_ERROR, "a Triton kernel does bfloat16 arithmetic, which Triton's "
                           "interpreter (Triton on the CPU, TRITON_INTERPRET=1) cannot run: evaluate it on a GPU, "
                           f"or in fp16 or fp32 here; while {doing}:\n" + describe_exception(e, self.candidate_file))  # fmt: skip
        if is_triton_compile_error(e):
            return Verdict(Status.COMPILE_ERROR, f"a Triton kernel failed to compile while {doing}:\n"
                           + describe_exception(e, self.candidate_file))  # fmt: skip
        what = "out of memory" if is_oom(e) else "an exception"
        return Verdict(Status.RUNTIME_ERROR, f"{what} while {doing}:\n" + self.explain(e))

    def explain(self, e: BaseException) -> str:
        """`describe_exception` for the candidate, plus what the sandbox allows when it refused the call."""
        text = describe_exception(e, self.candidate_file)
        if sandbox_held(self.strict_info.get("sandbox")) and _DENIED.search(text):
            text += ("\n  (strict mode's sandbox: files may be written only in the working directory, $TMPDIR and "
                     "the build cache; no network, no signals to other processes)")  # fmt: skip
        return text


def tensors(values) -> list:
    import torch
    from kb_agent.evaluator.compare import flatten_outputs

    return [v for v in flatten_outputs(values) if isinstance(v, torch.Tensor)]
