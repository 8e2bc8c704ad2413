"""The timing stage: the parity figure, the device figure, strict timing on fresh values, the profile."""

from __future__ import annotations

import dataclasses
import time

from kb_agent.evaluator.context import set_seed
from kb_agent.evaluator.result import TimingInfo


def run(ev) -> None:
    from kb_agent.evaluator import timing

    torch, st = ev.torch, ev.settings
    ev.chan.send("stage", name="timing")
    t0 = time.perf_counter()
    set_seed(st.seed)
    inputs = ev.draw_inputs()
    ref_in, new_in = ev.clone(inputs), ev.clone(inputs)
    info = TimingInfo(settings={"warmup": st.warmup, "discard": st.discard, "trials": st.timed_trials,
                                "flush_l2": st.flush_l2})  # fmt: skip
    try:
        if ev.device.type == "cuda":
            flusher = timing.L2Flusher(ev.device, st.flush_l2)
            info.method = timing.PARITY_METHOD
            info.settings["l2_flush_bytes"] = flusher.nbytes
            kw = dict(warmup=st.warmup, discard=st.discard, trials=st.timed_trials, flusher=flusher)
            info.reference = timing.stats(timing.time_parity(ev.ref_model, ref_in, **kw))
            info.candidate = timing.stats(timing.time_parity(ev.new_model, new_in, **kw))
            if st.device_timing:
                method, times = timing.time_device(
                    {"reference": (ev.ref_model, ref_in), "candidate": (ev.new_model, new_in)},
                    warmup=st.warmup, trials=st.timed_trials, flusher=flusher, atol=ev.atol, rtol=ev.rtol,
                )  # fmt: skip
                info.device_method = method
                info.device_reference = timing.stats(times["reference"])
                info.device_candidate = timing.stats(times["candidate"])
                info.device_speedup = info.device_reference.median_ms / info.device_candidate.median_ms
                info.device_speedup_ci95 = timing.median_ratio_ci(times["reference"], times["candidate"])
            if st.baseline_compile:
                compiled = torch.compile(ev.ref_model)
                info.compile_reference = timing.stats(timing.time_parity(compiled, ref_in, **kw))
                info.compile_speedup = info.compile_reference.mean_ms / info.candidate.mean_ms
        else:
            info.method = timing.CPU_METHOD
            kw = dict(warmup=min(st.warmup, 1), trials=max(1, min(st.timed_trials, 5)))
            info.settings.update(kw, flush_l2=False)
            info.reference = timing.stats(timing.time_cpu(ev.ref_model, ref_in, **kw))
            info.candidate = timing.stats(timing.time_cpu(ev.new_model, new_in, **kw))
        if st.repro_on(ev.device.type):  # the reproducible figure, beside parity (evaluator.timing)
            timing.time_repro(info, {"reference": (ev.ref_model, ref_in), "candidate": (ev.new_model, new_in)}, st,
                              device=ev.device, flusher=flusher if ev.device.type == "cuda" else None,
                              atol=ev.atol, rtol=ev.rtol)  # fmt: skip
        if ev.strict:
            strict_timing(ev, info, new_in, flusher if ev.device.type == "cuda" else None)
    except BaseException as e:  # noqa: BLE001
        raise ev.runtime_verdict(e, "timing the candidate") from None
    info.speedup = info.reference.mean_ms / info.candidate.mean_ms
    info.speedup_ci95 = timing.mean_ratio_ci(info.reference, info.candidate)
    info.seconds = time.perf_counter() - t0
    ev.chan.send("timing", timing=dataclasses.asdict(info))
    if st.profile and ev.device.type == "cuda":
        from kb_agent.evaluator.profile import profile_forward
        from kb_agent.evaluator.thresholds import MIN_CUSTOM_SHARE

        try:
            prof = profile_forward(ev.new_model, new_in)
            ev.chan.send("profile", profile=dataclasses.asdict(prof))
            share = prof.custom_share or 0.0
            ev.strict_info["custom_share"] = share
            ev.checks.record("custom_kernels_do_the_work", bool(prof.custom_kernel_ran) and share >= MIN_CUSTOM_SHARE,
                               f"custom kernels took {share:.0%} of the GPU time of one forward (at least "
                               f"{MIN_CUSTOM_SHARE:.0%} needed; the rest ran in PyTorch/library kernels)")  # fmt: skip
        except Exception as e:  # the profile is feedback, not a verdict
            ev.chan.send("profile_error", message=f"{type(e).__name__}: {e}")
    sol = ev.strict_info.get("speed_of_light", {})
    if ev.strict and sol.get("floor_ms") and info.candidate:
        best = min(
            info.candidate.min_ms,
            info.device_candidate.median_ms if info.device_candidate else float("inf"),
        )
        from kb_agent.evaluator.thresholds import SOL_SLACK

        sol["candidate_ms"] = best
        sol["fraction"] = sol["floor_ms"] / best if best > 0 else None
        ev.checks.record("speed_of_light", best >= SOL_SLACK * sol["floor_ms"],
                           f"{best:.4f} ms is faster than physically possible ({sol['floor_ms']:.4f} ms to move "
                           f"{sol['bytes']} bytes and do {sol['flops']} FLOPs)")  # fmt: skip


def strict_timing(ev, info, new_in: list, flusher) -> None:
    """Fresh input values per timed call; host clock with a device-wide sync beside the events; the
    last output checked against the reference on the same inputs."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.compare import compare_outputs
    from kb_agent.evaluator.thresholds import REPLAY_FLOOR, STREAM_HOST_FACTOR, STREAM_HOST_SLACK_MS

    inputs = ev.clone(new_in)
    events, host, out = timing.time_strict(ev.new_model, inputs, trials=ev.settings.strict_timed_trials,
                                           flusher=flusher, device=ev.device)  # fmt: skip
    fresh, wall = timing.stats(events), timing.stats(host)
    info.settings["strict"] = {
        "trials": len(events),
        "event_mean_ms": fresh.mean_ms,
        "host_mean_ms": wall.mean_ms,
    }
    if ev.device.type == "cuda":
        ev.checks.record("timed_work_on_stream", wall.median_ms <= STREAM_HOST_FACTOR * fresh.median_ms + STREAM_HOST_SLACK_MS,
                           f"the host waited {wall.median_ms:.3f} ms per call for the device but the timed "
                           f"stream saw {fresh.median_ms:.3f} ms: work escaped to another stream or thread")  # fmt: skip
    # a replayed output costs next to nothing, in its every call (see thresholds.REPLAY_FLOOR)
    floor = REPLAY_FLOOR[ev.device.type]
    repeated = info.candidate
    honest = repeated.median_ms >= floor * fresh.median_ms or repeated.min_ms >= floor * fresh.min_ms
    ev.checks.record("no_replay", honest,
                       f"{repeated.median_ms:.4f} ms per call on repeated inputs but "
                       f"{fresh.median_ms:.4f} ms on fresh values: outputs cached or replayed?")  # fmt: skip
    with ev.torch.no_grad():
        expected = ev.ref_model(*ev.clone(inputs))
    r = compare_outputs(expected, out, ev.atol, ev.rtol, trial=-1, seed=-1)
    ev.checks.record("timing_outputs", r.passed, f"the output of the last timed call was wrong ({r.problem})")
