"""`kb-agent baseline`'s child: time the reference eager and under `torch.compile` (no candidate).

The protocol is the timing stage's for the reference: the same seed and inputs (`Evaluation.draw_inputs`
after `set_seed(settings.seed)`), the model built as the build stage builds it, and on CUDA KernelBench's
parity timing (`timing.time_parity`: warm-up, discarded calls, L2 flushed and the device synchronized
around each timed call, the mean the figure); on the CPU the host clock (`timing.time_cpu`, the same
reduced trial counts the timing stage uses there). The compiled model is called once before timing: that
call's wall seconds are the compilation (`compile_s`), and its output must match the eager output at the
precision's tolerance, else the compiled figure is not kept (`compile_failed`).
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


def run(ev, compile_mode: str = "default") -> None:
    """Time the reference eager, then `torch.compile(model, mode=compile_mode)` (inductor). Sends a
    "baseline" part (method, settings, eager and compiled TimingStats in ms, compile_s, compile_error),
    then the verdict: `ok`, `compile_failed` (the eager figure stands alone) or `error` (no figure)."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.compare import compare_outputs

    torch, chan, st = ev.torch, ev.chan, ev.settings
    if compile_mode not in COMPILE_MODES:
        chan.send("done", status="error", message=f"unknown compile mode {compile_mode!r}")
        return
    found = {"compile_mode": compile_mode, "method": None, "settings": {}, "eager": None, "compiled": None,
             "compile_s": None, "compile_error": None}  # fmt: skip
    chan.send("stage", name="build")
    try:
        ref_path = ev.workdir / "reference.py"
        ref_path.write_text(ev.problem["code"])
        ev.ref_mod = load_module(ref_path, "kb_reference")
        set_seed(st.seed)
        init = ev.prepare(ev.ref_mod.get_init_inputs())
        with torch.no_grad():
            set_seed(st.seed)
            model = ev.ref_mod.Model(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype)
        chan.send("stage", name="timing")
        set_seed(st.seed)
        inputs = ev.draw_inputs()
        method, settings, time_fn = _timer(ev)
        found["method"], found["settings"] = method, settings
        found["eager"] = dataclasses.asdict(timing.stats(time_fn(model, ev.clone(inputs))))
        chan.send(
            "baseline", baseline=found
        )  # the eager figure stands if torch.compile then runs out of time
    except BaseException as e:  # noqa: BLE001
        what = "out of memory (other jobs on this device?)" if is_oom(e) else "the reference failed"
        chan.send("baseline", baseline=found)
        chan.send("done", status="error", message=f"{what}: " + describe_exception(e, str(ev.workdir / "reference.py"),
                                                                                  label="reference"))  # fmt: skip
        return
    try:
        compiled = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
        with torch.no_grad():
            expected = model(*ev.clone(inputs))
            t0 = time.perf_counter()
            got = compiled(*ev.clone(inputs))
            ev.sync()
            found["compile_s"] = time.perf_counter() - t0
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
