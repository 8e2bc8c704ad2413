"""The build stage: import the reference, import (and so build) the candidate, arm strict mode's watchers
before the candidate's first line runs, and construct both models."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from kb_agent.evaluator.context import (
    Verdict,
    describe_exception,
    is_triton_compile_error,
    load_module,
    record_tampering,
    set_seed,
)
from kb_agent.evaluator.result import CompileInfo, Status

_OWN_MODULES = {
    "__main__",
    "json",
    "kb_agent.evaluator.context",
    "kb_agent.evaluator.strict",
    "kb_agent.evaluator.kernel_probe",
    "kb_agent.evaluator.compare",
    "kb_agent.evaluator.diagnosis",
    "kb_agent.evaluator.timing",
    "kb_agent.evaluator.thresholds",
    "kb_agent.evaluator.stages.build",
    "kb_agent.evaluator.stages.correctness",
    "kb_agent.evaluator.stages.strict_trials",
    "kb_agent.evaluator.stages.timing",
}

# modules whose attributes the stages call as they compute and report, guarded like the evaluator's own
# (their contents are not: not ours): the standard library's (`dataclasses.asdict` makes every stage's
# record; a candidate's wrapper of it multiplied the reported speedup by 10 and passed every check,
# helper-13, 2026-12-07; `statistics.median` makes every timing figure; `random.seed` seeds before every
# reference call the harness judges with, and one that raised there went unchecked, helper-27) and the
# evaluator's records
_HELPER_MODULES = ("dataclasses", "statistics", "math", "functools", "random", "kb_agent.evaluator",
                   "kb_agent.evaluator.result", "kb_agent.evaluator.settings", "kb_agent.evaluator.hardware")  # fmt: skip


class BuildVerdict(Verdict):
    """A verdict of the candidate's import that follows from its sources and the toolchain alone, not from
    what its import-time code sees (a GPU or none): a compiler's error, a syntax error, CUDA sources this
    torch cannot build. The build child (`prebuild`) ends the evaluation with these and only these."""


def run(ev) -> None:
    """The build stage of a run child (and of a one-phase evaluation), in KernelBench's order: import the
    reference and construct its model, then import (and so build) the candidate and construct its model.
    The reference is built before any candidate code runs: a candidate that patched `torch.nn.init` at
    import had the reference built, and pinned, with zeroed weights (helper-15, 2026-12-07)."""
    load_reference(ev)
    construct_reference(ev)
    if ev.strict:
        from kb_agent.evaluator.stages.timing import reference_alone

        reference_alone(ev)
    verdict = load_candidate(ev)
    if verdict:
        raise verdict
    construct_candidate(ev)


def prebuild(ev, arch: str) -> None:
    """Phase 1 of a split evaluation (`EvalSettings.split_build`), in a build child that sees no GPU:
    `load` the candidate, so that every `load_inline` build lands in its build folder, for `arch` (the
    GPU's compute capability, "9.0", from the harness), then tell the parent how it went.

    Sends the `compile` part, then `done`: with a `BuildVerdict` (after the strict facts, in strict mode,
    exactly as a one-phase evaluation sends them at that point) the evaluation ends here with the status
    and message the model would have seen (`final` true); any other outcome is status "built" (`final`
    false; the message says what the import raised, if anything), and the run child decides. Triton kernels compile at their first
    launch, in the run child; here they are only imported (Python's syntax check)."""
    ev.arch = arch
    send, strict_facts = ev.chan.send, ev.strict_facts  # bound before any candidate code runs
    try:
        verdict = load(ev)
    except Verdict as v:  # the reference failed to import (here, without a GPU): the run child judges it
        verdict = v
    if isinstance(verdict, BuildVerdict):
        if ev.strict:
            send("strict", strict=strict_facts(verdict.status))
        send("done", status=str(verdict.status), message=verdict.message, final=True)
    else:
        send("done", status="built", message=verdict.message if verdict else "", final=False)


def load(ev) -> Verdict | None:
    """Import the reference, then the candidate (`load_reference`, `load_candidate`)."""
    load_reference(ev)
    return load_candidate(ev)


def load_reference(ev) -> None:
    """Import the reference program (`ev.ref_mod`); raises Verdict when it fails to import."""
    ev.chan.send("stage", name="build")
    ref_path = ev.workdir / "reference.py"
    ref_path.write_text(ev.problem["code"])
    try:
        ev.ref_mod = load_module(ref_path, "kb_reference")
    except Exception as e:
        raise Verdict(Status.RUNTIME_ERROR, "the reference program failed to import (not the candidate's fault): "
                      + describe_exception(e, str(ref_path), label="reference")) from None  # fmt: skip


def load_candidate(ev) -> Verdict | None:
    """Import the candidate (its `load_inline` calls build through `LoadInlineWrapper`), strict mode's
    watchers armed before its first line runs. Sends the `compile` part. Returns the verdict of a failed
    import (a `BuildVerdict` where it follows from the sources alone), None when it succeeded; raises
    BuildVerdict for CUDA sources this torch cannot build."""
    from kb_agent.evaluator.build import BuildError, CudaUnavailable, LoadInlineWrapper, detect_backend

    backend = detect_backend(ev.candidate_src)
    info = CompileInfo(backend=backend)
    if ev.strict and ev.settings.backend != "auto":  # a study of CUDA kernels scores CUDA kernels
        ev.checks.record("requested_backend", backend == ev.settings.backend,
                           f"{ev.settings.backend} kernels were asked for; this candidate's are {backend}")  # fmt: skip
    wrapper = LoadInlineWrapper(
        ev.build_root, ev.arch, cuda_torch=ev.torch.version.cuda is not None,
        salt=(ev.torch.__version__, os.environ.get("TORCH_CUDA_ARCH_LIST"), sys.version), bind_root=ev.bind_root,
    )  # fmt: skip
    wrapper.install()
    # the evaluator's own modules are imported (and bind what they use) before any candidate code runs
    import kb_agent.evaluator.compare
    import kb_agent.evaluator.diagnosis
    import kb_agent.evaluator.kernel_probe
    import kb_agent.evaluator.profile
    import kb_agent.evaluator.stages.correctness
    import kb_agent.evaluator.stages.strict_trials
    import kb_agent.evaluator.stages.timing
    import kb_agent.evaluator.strict
    import kb_agent.evaluator.thresholds
    import kb_agent.evaluator.timing  # noqa: F401

    Path(ev.candidate_file).write_text(ev.candidate_src)
    if ev.strict:
        arm_strict_checks(ev, backend)
        wrapper.probe = ev.probe = kb_agent.evaluator.kernel_probe.KernelProbe(ev.torch)
        ev.probe.install_triton(sys.modules)  # (Triton imported before the candidate: hooked before it runs)
    t0 = time.perf_counter()
    verdict = None
    try:
        cand = load_module(Path(ev.candidate_file), "kb_candidate")
        ev.ModelNew = getattr(cand, "ModelNew", None)
        if not isinstance(ev.ModelNew, type):
            verdict = Verdict(Status.COMPILE_ERROR, "the candidate defines no class ModelNew; define "
                              "`class ModelNew(nn.Module)` with the reference Model's __init__ and forward signature")  # fmt: skip
    except BuildError as e:
        info.errors, info.log = e.errors, e.log
        verdict = BuildVerdict(
            Status.COMPILE_ERROR, "compilation failed:\n" + "\n".join(e.errors or [e.log[-2000:]])
        )
    except CudaUnavailable as e:
        info.ok = True
        info.seconds = time.perf_counter() - t0
        ev.chan.send("compile", compile=dataclasses.asdict(info), builds=wrapper.builds)
        raise BuildVerdict(Status.RUNTIME_ERROR, str(e)) from None
    except SyntaxError as e:
        info.errors = [f"candidate.py({e.lineno}): error: {e.msg}\n    > {(e.text or '').strip()}"]
        verdict = BuildVerdict(Status.COMPILE_ERROR, "syntax error:\n" + info.errors[0])
    except BaseException as e:  # noqa: BLE001 - an import may raise anything, SystemExit included
        if is_triton_compile_error(e):
            info.errors = [str(e)[:2000]]
        verdict = Verdict(Status.COMPILE_ERROR, "importing the candidate failed:\n" + ev.explain(e))
    info.seconds = time.perf_counter() - t0
    info.ok = verdict is None
    if getattr(ev, "probe", None) is not None:
        ev.probe.install_triton(sys.modules)  # the Triton the candidate imported
    ev.chan.send("compile", compile=dataclasses.asdict(info), builds=wrapper.builds)
    if ev.strict and verdict is None:
        # a global module pre-hook registered at import and removed in the candidate's first forward
        # saw the reference's first call, and no check after a candidate call could (helper-14)
        record_tampering(ev, "after its import", every_op=True)
    return verdict


def arm_strict_checks(ev, backend: str) -> None:
    """Snapshot what the evaluator relies on and start watching side effects, before the candidate's
    code first runs (its import)."""
    from kb_agent.evaluator.strict import (
        DispatchGuard,
        PinnedState,
        SideEffectMonitor,
        TamperGuard,
        guarded_objects,
        interpreter_hooks,
        library_work,
        process_settings,
        static_findings,
        thread_idents,
        torch_modules,
        torch_ops,
    )

    # the profiler's first use imports torch._dynamo, which rewraps torch.manual_seed and friends: do
    # it now, so the snapshot below sees torch as the checks will leave it
    torch_ops(ev.torch.relu, [ev.torch.ones(2)])
    library_work(ev.torch.relu, [ev.torch.ones(2)])  # the dispatch mode and flop counter, likewise
    found = static_findings(ev.candidate_src)
    ev.checks.record("static", not found, "; ".join(found))
    ev.checks.record("custom_kernel_source", backend != "torch",
                       "" if backend != "torch" else "no load_inline or Triton kernel in the source")  # fmt: skip
    ev.dispatch_guard = DispatchGuard(ev.torch)  # (runs the harness's comparison once: before the monitor)
    ev.settings_before = process_settings(ev.torch)
    ev.hooks_before = interpreter_hooks()
    ev.threads_before = thread_idents()
    roots = [ev.workdir, ev.build_root, os.environ.get("TRITON_CACHE_DIR", ev.workdir),
             os.environ.get("TMPDIR", ev.workdir)]  # fmt: skip
    from kb_agent.evaluator.build import LoadInlineWrapper

    ev.monitor = SideEffectMonitor([Path(r) for r in roots], candidate_dir=ev.workdir,
                                   trusted_code=(LoadInlineWrapper._call.__code__,))  # fmt: skip
    ev.monitor.install()
    # read through the class: an instance attribute may shadow it
    ev.monitor_tampered = SideEffectMonitor.tampered
    # the evaluator's own modules and classes: the child's entry (__main__), the stages, the judge's inputs
    own = {name: mod for name, mod in sys.modules.items() if name in _OWN_MODULES}
    own.update({"Evaluation": type(ev), "Channel": type(ev.chan), "Checks": type(ev.checks),
                "SideEffectMonitor": SideEffectMonitor, "TamperGuard": TamperGuard})  # fmt: skip
    # their constants too, and the settings' (TOLERANCES: what ev.atol and ev.rtol are)
    ours = tuple(name for name in own if name.startswith("kb_agent.evaluator")) + (
        "kb_agent.evaluator.settings",
    )
    own.update({name: sys.modules[name] for name in _HELPER_MODULES if name in sys.modules})
    ours = tuple(name for name in ours if name in own)
    ref_model = getattr(ev, "ref_model", None)  # constructed by now, but in a build child (`prebuild`)
    ev.guard = TamperGuard(
        {**guarded_objects(ev.torch, ev.ref_mod, ref_model), **own},
        contents=ours,
        closed=("torch._VF",),
        shallow=torch_modules(),
    )
    ev.guard_changed = ev.guard.changed  # bound now, like the verdict above
    if ref_model is not None:
        ev.pinned = PinnedState(ev)


def _init_inputs(ev) -> list:
    """`get_init_inputs()`, drawn under the evaluation's seed (KernelBench's), on the evaluation's device."""
    set_seed(ev.settings.seed)
    return ev.prepare(ev.ref_mod.get_init_inputs())


def construct_reference(ev) -> None:
    """`ev.ref_model`, constructed under the evaluation's seed; raises Verdict where it fails."""
    torch = ev.torch
    init = _init_inputs(ev)
    try:
        with torch.no_grad():
            set_seed(ev.settings.seed)
            ev.ref_model = ev.ref_mod.Model(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype)
    except Exception as e:
        raise Verdict(Status.RUNTIME_ERROR, "the reference Model failed to construct (not the candidate's "
                      "fault): " + describe_exception(e, "")) from None  # fmt: skip


def construct_candidate(ev) -> None:
    """`ev.new_model`, constructed from the same `get_init_inputs()` under the same seed as the reference;
    raises the runtime verdict where it fails. In strict mode the tamper checks run right after."""
    torch = ev.torch
    init = _init_inputs(ev)
    try:
        with torch.no_grad():
            set_seed(ev.settings.seed)
            ev.new_model = ev.ModelNew(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype)
        ev.sync()
        if ev.pinned is not None:
            ev.pinned.add_candidate(ev)
            from kb_agent.evaluator.strict import pause_collections

            pause_collections(ev)
            record_tampering(ev, "after its constructor", every_op=True)
    except BaseException as e:  # noqa: BLE001
        raise ev.runtime_verdict(e, "constructing ModelNew") from None
