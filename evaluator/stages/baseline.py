"""`kb-agent baseline`'s child: time the reference eager and under `torch.compile` (no candidate).

The protocol is the timing stage's for the reference: the same seed and inputs (`Evaluation.draw_inputs`
after `set_seed(settings.seed)`), the model built as the build stage builds it, and on CUDA KernelBench's
parity timing (`timing.time_parity`: warm-up, discarded calls, L2 flushed and the device synchronized
around each timed call, the mean the figure); on the CPU the host clock (`timing.time_cpu`, the same
reduced trial counts the timing stage uses there). The compiled model is called once before timing: that
call's wall seconds are the compilation (`compile_s`), and its output must match the eager output at the
precision's tolerance, else the compiled figure is not kept (`compile_failed`).

`warm` is `kb-agent baseline --jobs`'s warm-up child: the same reference, inputs and first compiled call,
nothing timed but that call, so that torch.compile's on-disk caches (inductor's FX graph and AOT autograd
caches, Triton's kernels: the folder the job's environment names) hold the compilation when `run` asks
for it again. Both report the caches' hits and misses of their first compiled call (`compile_cache`).
"""

from __future__ import annotations

import dataclasses
import time

from kb_agent.evaluator.context import describe_exception, is_oom, load_module, set_seed

COMPILE_MODES = ("default", "max-autotune")


def _timer(ev):
    """(method, settings, fn(model, inputs) -> per-call ms) under the evaluator's timing protocol."""
    from kb_agent.evaluator import timing

    st = ev.settings
    if ev.device.type == "cuda":
        flusher = timing.L2Flusher(ev.device, st.flush_l2)
        kw = dict(warmup=st.warmup, discard=st.discard, trials=st.timed_trials, flusher=flusher)
        settings = {"warmup": st.warmup, "discard": st.discard, "trials": st.timed_trials,
                    "flush_l2": st.flush_l2, "l2_flush_bytes": flusher.nbytes}  # fmt: skip
        return timing.PARITY_METHOD, settings, lambda m, x: timing.time_parity(m, x, **kw)
    kw = dict(warmup=min(st.warmup, 1), trials=max(1, min(st.timed_trials, 5)))
    return timing.CPU_METHOD, {**kw, "flush_l2": False}, lambda m, x: timing.time_cpu(m, x, **kw)


def use_compile_caches() -> None:
    """Turn on torch.compile's on-disk caches that hold a compilation across processes (inductor's FX
    graph cache and the AOT autograd cache; on by default in torch, set here because a forked child's
    config was read before the job's environment was in place). Where they write is
    `TORCHINDUCTOR_CACHE_DIR` (and `TRITON_CACHE_DIR` for Triton's kernels), read at compile time."""
    import torch._functorch.config
    import torch._inductor.config

    torch._inductor.config.fx_graph_cache = True
    torch._functorch.config.enable_autograd_cache = True


def _cache_counts() -> dict[str, int]:
    """This process's hits, misses and bypasses of inductor's FX graph cache and the AOT autograd cache."""
    from torch._dynamo.utils import counters

    fx, aot = counters["inductor"], counters["aot_autograd"]
    return {"fxgraph_hit": fx["fxgraph_cache_hit"], "fxgraph_miss": fx["fxgraph_cache_miss"],
            "fxgraph_bypass": fx["fxgraph_cache_bypass"], "autograd_hit": aot["autograd_cache_hit"],
            "autograd_miss": aot["autograd_cache_miss"], "autograd_bypass": aot["autograd_cache_bypass"]}  # fmt: skip


def _reference(ev):
    """The reference model, built as the build stage builds it (sends the "build" stage)."""
    torch, st = ev.torch, ev.settings
    ev.chan.send("stage", name="build")
    ref_path = ev.workdir / "reference.py"
    ref_path.write_text(ev.problem["code"])
    ev.ref_mod = load_module(ref_path, "kb_reference")
    set_seed(st.seed)
    init = ev.prepare(ev.ref_mod.get_init_inputs())
    with torch.no_grad():
        set_seed(st.seed)
        return ev.ref_mod.Model(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype)


def _inputs(ev) -> list:
    """The timing stage's inputs (sends the "timing" stage)."""
    ev.chan.send("stage", name="timing")
    set_seed(ev.settings.seed)
    return ev.draw_inputs()


def _failed(ev, e: BaseException) -> str:
    what = "out of memory (other jobs on this device?)" if is_oom(e) else "the reference failed"
    return f"{what}: " + describe_exception(e, str(ev.workdir / "reference.py"), label="reference")


def _first_compiled_call(ev, model, inputs, compile_mode: str):
    """(compiled model, its first output, that call's wall seconds: the compilation), under no_grad."""
    torch = ev.torch
    compiled = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
    with torch.no_grad():
        t0 = time.perf_counter()
        got = compiled(*ev.clone(inputs))
        ev.sync()
        return compiled, got, time.perf_counter() - t0


def run(ev, compile_mode: str = "default") -> None:
    """Time the reference eager, then `torch.compile(model, mode=compile_mode)` (inductor). Sends a
    "baseline" part (method, settings, eager and compiled TimingStats in ms, compile_s, compile_error,
    compile_cache), then the verdict: `ok`, `compile_failed` (the eager figure stands alone) or `error`
    (no figure)."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.compare import compare_outputs

    torch, chan, st = ev.torch, ev.chan, ev.settings
    if compile_mode not in COMPILE_MODES:
        chan.send("done", status="error", message=f"unknown compile mode {compile_mode!r}")
        return
    found = {"compile_mode": compile_mode, "method": None, "settings": {}, "eager": None, "compiled": None,
             "compile_s": None, "compile_error": None, "compile_cache": None}  # fmt: skip
    try:
        model = _reference(ev)
        inputs = _inputs(ev)
        method, settings, time_fn = _timer(ev)
        found["method"], found["settings"] = method, settings
        found["eager"] = dataclasses.asdict(timing.stats(time_fn(model, ev.clone(inputs))))
        chan.send(
            "baseline", baseline=found
        )  # the eager figure stands if torch.compile then runs out of time
    except BaseException as e:  # noqa: BLE001
        chan.send("baseline", baseline=found)
        chan.send("done", status="error", message=_failed(ev, e))
        return
    try:
        with torch.no_grad():
            expected = model(*ev.clone(inputs))
        compiled, got, found["compile_s"] = _first_compiled_call(ev, model, inputs, compile_mode)
        found["compile_cache"] = _cache_counts()
        r = compare_outputs(expected, got, ev.atol, ev.rtol, trial=0, seed=st.seed)
        del expected, got
        if not r.passed:
            found["compile_error"] = f"torch.compile's output differs from eager ({r.problem})"
        else:
            found["compiled"] = dataclasses.asdict(timing.stats(time_fn(compiled, ev.clone(inputs))))
    except BaseException as e:  # noqa: BLE001 - torch.compile's failure is a finding, not a crash
        found["compile_error"] = describe_exception(e, str(ev.workdir / "reference.py"), label="reference")
    chan.send("baseline", baseline=found)
    if found["compiled"] is None:
        chan.send("done", status="compile_failed", message=found["compile_error"] or "torch.compile failed")
    else:
        chan.send("done", status="ok", message="ok")


def warm(ev, compile_mode: str = "default", compile_threads: int | None = None) -> None:
    """Compile the reference as `run` does, timing nothing but the first compiled call: the reference
    built, the timing stage's inputs drawn, one eager call (as `run` makes before it compiles), then
    `torch.compile`'s first call, with `compile_threads` inductor compile workers (None: inductor's
    default, one per CPU; not part of the FX graph cache's key). Sends a "baseline" part (compile_mode,
    compile_s: that call's wall seconds, compile_error, compile_cache), then the verdict: `ok`,
    `compile_failed` (torch.compile raised) or `error` (the reference failed, or anything ran out of
    memory: "out of memory ...")."""
    torch, chan = ev.torch, ev.chan
    if compile_mode not in COMPILE_MODES:
        chan.send("done", status="error", message=f"unknown compile mode {compile_mode!r}")
        return
    found = {"compile_mode": compile_mode, "compile_s": None, "compile_error": None, "compile_cache": None}
    if compile_threads:
        import torch._inductor.config

        torch._inductor.config.compile_threads = compile_threads
    try:
        model = _reference(ev)
        inputs = _inputs(ev)
        with torch.no_grad():
            model(*ev.clone(inputs))
        ev.sync()
    except BaseException as e:  # noqa: BLE001
        chan.send("baseline", baseline=found)
        chan.send("done", status="error", message=_failed(ev, e))
        return
    status, message = "ok", "ok"
    try:
        _, _, found["compile_s"] = _first_compiled_call(ev, model, inputs, compile_mode)
    except BaseException as e:  # noqa: BLE001 - torch.compile's failure is a finding, not a crash
        oom = is_oom(e)  # an "error": `run_pooled` compiles it again alone
        where = str(ev.workdir / "reference.py")
        message = _failed(ev, e) if oom else describe_exception(e, where, label="reference")
        status, found["compile_error"] = ("error" if oom else "compile_failed"), message
    found["compile_cache"] = _cache_counts()
    chan.send("baseline", baseline=found)
    chan.send("done", status=status, message=message)
