"""The timing stage: the parity figure, the device figure, strict timing on fresh values, the profile."""

from __future__ import annotations

import dataclasses
import math
import time

from kb_agent.evaluator.context import record_tampering, set_seed, tensors
from kb_agent.evaluator.result import TimingInfo
from kb_agent.evaluator.strict import collect_garbage


def reference_alone(ev) -> None:
    """Strict mode, in the run child before any candidate code runs (`stages.build.run`): the reference
    timed alone on the timing stage's inputs (the same seed and draw), a few calls (REFERENCE_ALONE_TRIALS)
    under the timing stage's protocol (on CUDA KernelBench's synchronized calls after an L2 flush, on the
    CPU the host clock). `reference_speed` holds the timing stage's figures for the reference to it."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.thresholds import REFERENCE_ALONE_TRIALS

    kind = ev.device.type
    set_seed(ev.settings.seed)
    ref_in = ev.clone(ev.draw_inputs())
    trials = REFERENCE_ALONE_TRIALS["cuda" if kind == "cuda" else "cpu"]
    if kind == "cuda":
        flusher = timing.L2Flusher(ev.device, ev.settings.flush_l2)
        ms = timing.time_parity(ev.ref_model, ref_in, warmup=1, discard=0, trials=trials, flusher=flusher)
        del flusher
    else:
        ms = timing.time_cpu(ev.ref_model, ref_in, warmup=1, trials=trials)
    ev.reference_alone = timing.stats(ms)
    ev.strict_info["reference_alone_ms"] = ms


def record_reference_speed(ev, figures: dict) -> None:
    """`reference_speed` (on a GPU; data alone on the CPU): each of the timing stage's figures for the
    reference (`figures`: name -> TimingStats) against `ev.reference_alone`, its median and its fastest
    call both slower by more than REFERENCE_SLOWED and REFERENCE_SLOWED_SLACK_MS fail."""
    from kb_agent.evaluator.thresholds import REFERENCE_SLOWED, REFERENCE_SLOWED_SLACK_MS

    alone = getattr(ev, "reference_alone", None)
    if alone is None or not alone.median_ms:
        return
    kind = "cuda" if ev.device.type == "cuda" else "cpu"
    factor, slack = REFERENCE_SLOWED[kind], REFERENCE_SLOWED_SLACK_MS[kind]

    def slowed(now: float, then: float) -> bool:
        return now > factor * then and now - then > slack

    bad = [f"{name} {f.median_ms:.4f} ms per call (fastest {f.min_ms:.4f})" for name, f in figures.items()
           if f is not None and slowed(f.median_ms, alone.median_ms) and slowed(f.min_ms, alone.min_ms)]  # fmt: skip
    ev.strict_info["reference_speed"] = {
        name: f.median_ms / alone.median_ms for name, f in figures.items() if f
    }
    if kind == "cpu":
        # data alone on the CPU: other processes' load there slowed an honest evaluation's reference from
        # 0.011 to 8 ms per call in .ci/run (2026-12-07); the ways found to slow it between the candidate's
        # calls (a thread, a kernel of its own) fail `tampering` at the timing stage's start
        ev.strict_info["reference_speed_failed"] = bool(bad)
        return
    why = (
        "something the candidate left between its calls (a thread, a kernel of its own over the reference's "
        "op, a setting) slowed the reference"
    )
    if _default_device_mode_on():
        # torch.set_default_device's mode runs every torch call of the process through Python, the
        # reference's too (toy relu on the CPU: 0.011 -> 8 ms per call), which KernelBench, timing the
        # reference in a process of its own, never sees
        why = (
            "torch.set_default_device's mode, left on by the candidate, slows every torch call in the "
            "process, the reference's too: pass device= to the tensors it creates instead"
        )
    ev.checks.record("reference_speed", not bad,
                     f"the reference's {'; '.join(bad)} in the timing stage, but {alone.median_ms:.4f} ms "
                     f"(fastest {alone.min_ms:.4f}) timed alone before the candidate's import: {why}")  # fmt: skip


def _default_device_mode_on() -> bool:
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    return any(type(m) is DeviceContext for m in _get_current_function_mode_stack())


def seal(ev, model: str, stats) -> None:
    """Send a parity figure to the parent as soon as it is measured (`runner` holds the final timing
    record to it), before any later call of the candidate: one that reached the timing stage's record
    through frames a torch helper handed it multiplied the reference's mean by 1e6 (helper-19,
    2026-12-07). The candidate's own calls still run while its figure is measured."""
    ev.chan.send("sealed", model=model, stats=dataclasses.asdict(stats))


def run(ev) -> None:
    from kb_agent.evaluator import timing

    torch, st = ev.torch, ev.settings
    ev.chan.send("stage", name="timing")
    t0 = time.perf_counter()
    collect_garbage(ev)  # (before the check: what a __del__ leaves, it sees)
    if ev.strict:  # what the candidate's last calls (the kernel probe's, the strict trials') left
        record_tampering(ev, "before the timing stage")
    set_seed(st.seed)
    # each model times a copy of the drawn set, as every stage gives them (dense tensors of their own, not
    # a get_inputs() that returns an expanded view, one tensor twice, or a problem's cached tensor); the
    # drawn set dies before the second copy is made
    new_in = ev.clone(ev.draw_inputs())
    ref_in = ev.clone(new_in)
    layout = _layout(torch, new_in)  # what strict timing expects of the candidate's tensors after parity
    info = TimingInfo(settings={"warmup": st.warmup, "discard": st.discard, "trials": st.timed_trials,
                                "flush_l2": st.flush_l2})  # fmt: skip
    graphs: dict = {}  # each model's CUDA graph, captured once for the device and reproducible figures
    try:
        if ev.device.type == "cuda":
            flusher = timing.L2Flusher(ev.device, st.flush_l2)
            info.method = timing.PARITY_METHOD
            info.settings["l2_flush_bytes"] = flusher.nbytes
            kw = dict(warmup=st.warmup, discard=st.discard, trials=st.timed_trials, flusher=flusher)
            info.reference = timing.stats(timing.time_parity(ev.ref_model, ref_in, **kw))
            seal(ev, "reference", info.reference)
            launched = _launches(ev)
            parity_ms = timing.time_parity(ev.new_model, new_in, **kw)
            check_timed_launches(ev, launched, st.warmup + st.discard + st.timed_trials)
            info.candidate = timing.stats(parity_ms)
            seal(ev, "candidate", info.candidate)
            if st.baseline_compile:
                compiled = torch.compile(ev.ref_model)
                info.compile_reference = timing.stats(timing.time_parity(compiled, ref_in, **kw))
                info.compile_speedup = info.compile_reference.mean_ms / info.candidate.mean_ms
        else:
            info.method = timing.CPU_METHOD
            kw = dict(warmup=min(st.warmup, 1), trials=max(1, min(st.timed_trials, 5)))
            info.settings.update(kw, flush_l2=False)
            info.reference = timing.stats(timing.time_cpu(ev.ref_model, ref_in, **kw))
            seal(ev, "reference", info.reference)
            launched = _launches(ev)
            parity_ms = timing.time_cpu(ev.new_model, new_in, **kw)
            check_timed_launches(ev, launched, kw["warmup"] + kw["trials"])
            info.candidate = timing.stats(parity_ms)
            seal(ev, "candidate", info.candidate)
        both = {"reference": (ev.ref_model, ref_in), "candidate": (ev.new_model, new_in)}
        repro = None
        if st.repro_on(ev.device.type):  # the reproducible figure, beside parity (evaluator.timing)
            repro = timing.time_repro(info, both, st, device=ev.device,
                                      flusher=flusher if ev.device.type == "cuda" else None,
                                      atol=ev.atol, rtol=ev.rtol, graphs=graphs)  # fmt: skip
        if ev.device.type == "cuda" and st.device_timing:
            device_figure(ev, info, both, repro, flusher, graphs)
        if ev.strict:
            record_reference_speed(ev, {"parity": info.reference, "reproducible": info.repro_reference})
        graphs.clear()  # their memory pools, before strict timing draws fresh inputs
        del ref_in, both  # nor the reference's inputs: strict timing times the candidate alone (new_in)
        if ev.strict:
            strict_timing(ev, info, new_in, flusher if ev.device.type == "cuda" else None, layout, parity_ms)
    except BaseException as e:  # noqa: BLE001
        raise ev.runtime_verdict(e, "timing the candidate") from None
    info.speedup = info.reference.mean_ms / info.candidate.mean_ms
    info.speedup_ci95 = timing.mean_ratio_ci(info.reference, info.candidate)
    info.seconds = time.perf_counter() - t0
    ev.chan.send("timing", timing=dataclasses.asdict(info))
    if st.profile and ev.device.type == "cuda":
        from kb_agent.evaluator.profile import profile_forward

        try:
            facts: dict = {}
            prof = profile_forward(ev.new_model, new_in, facts=facts)
            ev.chan.send("profile", profile=dataclasses.asdict(prof))
            record_library_share(ev, prof, facts["custom_by"])
        except Exception as e:  # the profile is feedback, not a verdict
            ev.chan.send("profile_error", message=f"{type(e).__name__}: {e}")
    sol = ev.strict_info.get("speed_of_light", {})
    if ev.strict and sol.get("floor_ms") and info.candidate:
        from kb_agent.evaluator.strict import judge_speed_of_light

        def best(parity, device):
            return min(parity.min_ms, device.median_ms if device else float("inf"))

        passed, detail = judge_speed_of_light(
            sol, best(info.candidate, info.device_candidate), best(info.reference, info.device_reference)
        )
        ev.checks.record("speed_of_light", passed, detail)


def device_figure(ev, info, both: dict, repro, flusher, graphs: dict) -> None:
    """The device figure (`TimingInfo.device_*`: medians without host launch latency, see
    `evaluator.timing`). Where the reproducible figure ran, its pairs are that figure's calls too: each
    is a CUDA-graph replay, or an eager call enqueued behind a spin so that no host latency reaches the
    device, bracketed by events after an L2 flush, which is the device figure's protocol; timing the
    same calls again in blocks per model cost a 6 GiB problem 0.36 s on an H200 (issue 13). Otherwise
    the figure times its own calls (`timing.time_device`). `info.settings["device"]` says which."""
    from kb_agent.evaluator import timing

    st = ev.settings
    if repro is not None:
        graph = info.repro_method == timing.REPRO_GRAPH_METHOD
        method = timing.DEVICE_GRAPH_METHOD if graph else timing.DEVICE_EVENTS_METHOD
        times = repro.times
        info.settings["device"] = {"from": "repro", "pairs": len(times["reference"])}
    else:
        method, times = timing.time_device(
            both, warmup=st.warmup, trials=st.timed_trials, flusher=flusher, atol=ev.atol, rtol=ev.rtol,
            graphs=graphs, min_trials=st.device_min_trials, target_rse=st.device_target_rse,
        )  # fmt: skip
        info.settings["device"] = {"min_trials": st.device_min_trials, "max_trials": st.timed_trials,
                                   "target_rse": st.device_target_rse}  # fmt: skip
    info.device_method = method
    info.device_reference = timing.stats(times["reference"])
    info.device_candidate = timing.stats(times["candidate"])
    info.device_speedup = info.device_reference.median_ms / info.device_candidate.median_ms
    info.device_speedup_ci95 = timing.median_ratio_ci(times["reference"], times["candidate"])


def record_library_share(ev, prof, custom_by: str) -> None:
    """The share of one forward's GPU time in library kernels, as data (`strict_info["library_share"]`,
    shown by `report`), never a verdict: KernelBench lets a candidate leave operators to cuBLAS/cuDNN.
    One fact from the profile is a check: when kernels are told apart by their launch site and none is
    the candidate's while no Triton kernel was launched, the candidate's extension functions only called
    library ops (`custom_kernels_do_the_work`)."""
    if prof.total_us:
        ev.strict_info["custom_share"] = prof.custom_share
        ev.strict_info["library_share"] = 1.0 - prof.custom_share
    ev.strict_info["library_share_by"] = custom_by
    probe = ev.strict_info.get("kernel_probe")
    if not (ev.strict and probe and custom_by == "launch_site") or prof.custom_kernel_ran:
        return
    names = [n for f in probe["observe"] for n in f["names"]]
    if names and not any(n.startswith("triton:") for n in names):
        ev.checks.record("custom_kernels_do_the_work", False,
                         f"the extension function(s) called ({', '.join(sorted(set(names))[:4])}) launched no GPU "
                         "kernel of their own: every kernel of the forward ran inside a PyTorch/library op")  # fmt: skip


def strict_timing(ev, info, inputs: list, flusher, layout: list, parity_ms: list[float]) -> None:
    """Fresh input values per timed call (`inputs`, the candidate's, are changed in place: a new draw of
    `get_inputs()` under a seed of the call's own where it fits, `_fitting_draw`); the device work
    the timed stream did not wait for, and outputs not ready on the current stream when the call returned;
    then one call on freshly drawn values, checked against the reference (`checked_call`). First the
    timed tensors get the timing draw's values again (`get_inputs()` under the stage's seed): whatever
    the candidate wrote into them during the parity figure is gone. `layout`: the tensors' shapes,
    strides, dtypes and devices as the stage made them; a candidate that changed them fails
    `inputs_unchanged`, and strict timing ends there. `parity_ms`: the candidate's parity figure, per call
    (ms), for `no_parity_replay`."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.thresholds import PARITY_REPLAY_FLOOR, PARITY_REPLAY_SHARE, REPLAY_FLOOR

    if _record_altered(ev, inputs, layout, "during the parity figure"):
        return
    _write_draw(ev, inputs, ev.settings.seed)

    def spot_check(before: list, out, seed: int, drawn: bool) -> None:
        judge_call(
            ev, inputs, before, out, "a timed call on fresh values, drawn at random", seed=seed, drawn=drawn
        )

    # a new draw per fresh call where drawing is cheap: on the device, or a CPU evaluation's own; drawn on
    # the host for a GPU (inputs_on_device off), 20 draws of KernelBench's largest inputs would take
    # minutes, and the timing draw plus offsets serve instead
    cheap = ev.settings.inputs_on_device or ev.device.type == "cpu"
    try:
        t = timing.time_strict(ev.new_model, inputs, trials=fresh_calls(ev, info), flusher=flusher,
                               device=ev.device, judge=spot_check, before_call=set_seed,
                               draw=(lambda seed: _fitting_draw(ev, inputs, seed)) if cheap else None)  # fmt: skip
    except timing.InputsAltered as e:
        ev.checks.record("inputs_unchanged", False, str(e))
        return
    fresh, wall, after = timing.stats(t.events_ms), timing.stats(t.host_ms), timing.stats(t.after_stream_ms)
    info.settings.setdefault("strict", {}).update({
        "trials": len(t.events_ms),
        "event_mean_ms": fresh.mean_ms,
        "host_mean_ms": wall.mean_ms,
        "event_median_ms": fresh.median_ms,
        "host_median_ms": wall.median_ms,
        "after_stream_median_ms": after.median_ms,
        "unready_calls": t.unready,
    })  # fmt: skip
    # judged before the census calls the candidate again on these tensors (an in-place kernel writes
    # them again there)
    if t.before_last is not None:
        judge_call(
            ev, inputs, t.before_last, t.out, "the last timed call", seed=t.last_seed, drawn=t.last_drawn
        )
    t.before_last = t.out = None
    if ev.device.type == "cuda":
        census = timing.stream_census(ev.new_model, inputs)
        ev.strict_info["streams"] = dataclasses.asdict(census)
        escaped = timing.work_escaped(t.events_ms, t.after_stream_ms)
        why = (f"after the timed stream's {fresh.median_ms:.3f} ms per call the device still had "
               f"{after.median_ms:.3f} ms of this candidate's work" if escaped else
               f"{census.unjoined} GPU operation(s) on another stream were still running when the current "
               "stream went past the call")  # fmt: skip
        ev.checks.record("timed_work_on_stream", not escaped and not census.unjoined,
                         why + ": work escaped to a stream the current stream does not wait for, or to a "
                         "thread (join side streams back with wait_stream or an event)")  # fmt: skip
        ev.checks.record("output_ready_on_stream", not t.unready,
                         f"in {t.unready} of {len(t.events_ms)} timed calls the output read on the current "
                         "stream right after forward returned differed from its value after a device-wide "
                         "synchronize: a consumer on the current stream races with the candidate's work")  # fmt: skip
    # a replayed output costs next to nothing, in its every call (see thresholds.REPLAY_FLOOR); both
    # kinds of call come from the one loop of time_strict, so whatever slows every call slows both
    floor = REPLAY_FLOOR[ev.device.type]
    repeated = timing.stats(t.repeat_events_ms)
    info.settings["strict"].update(repeat_trials=len(t.repeat_events_ms), repeat_median_ms=repeated.median_ms)
    honest = repeated.median_ms >= floor * fresh.median_ms or repeated.min_ms >= floor * fresh.min_ms
    ev.checks.record("no_replay", honest,
                       f"{repeated.median_ms:.4f} ms per call on repeated inputs but "
                       f"{fresh.median_ms:.4f} ms on fresh values (one loop, calls shuffled): outputs "
                       "cached or replayed?")  # fmt: skip
    # the parity figure (the headline speedup's, a mean) times the same tensors at the same version in
    # every call: an output replayed there, and computed honestly on fresh values, makes parity calls
    # far faster than the fresh-value ones (thresholds.PARITY_REPLAY_FLOOR); a few of them are allowed,
    # not the share that would move the mean (PARITY_REPLAY_SHARE; a replay in one call of three moved
    # it by a third and left the median alone). The fresh-value figure they are held to is that of the
    # judged calls (the faster of the two): a candidate that counts the fresh calls can return stale
    # outputs in all but the last, and the median of every fresh call would then be a replay's too
    parity, pfloor = info.candidate, PARITY_REPLAY_FLOOR[ev.device.type]
    judged = min(t.judged_events_ms, default=0.0)
    info.settings["strict"]["judged_events_ms"] = t.judged_events_ms
    if parity is not None and fresh.median_ms > 0:
        info.settings["strict"]["parity_over_fresh"] = parity.median_ms / fresh.median_ms
    if parity is not None and judged > 0:
        info.settings["strict"]["parity_over_judged"] = parity.median_ms / judged
        fast = sum(ms < pfloor * judged for ms in parity_ms)
        info.settings["strict"]["parity_calls_under_floor"] = fast
        ev.checks.record("no_parity_replay", fast <= PARITY_REPLAY_SHARE * len(parity_ms),
                         f"{fast} of {len(parity_ms)} calls of the parity figure (the same inputs every call; "
                         f"median {parity.median_ms:.4f} ms) took under {pfloor:g} x the {judged:.4f} ms of a "
                         "judged call on fresh values: outputs replayed while the inputs stay the same?")  # fmt: skip
    del t
    checked_call(ev, inputs, layout)


def fresh_calls(ev, info) -> int:
    """How many of strict timing's calls get fresh values: `strict_timed_trials`, or on a GPU fewer for
    a kernel of milliseconds, sized by its parity median (`thresholds.STRICT_FRESH_MS`,
    `STRICT_FEWEST_FRESH`); recorded in `settings["strict"]["sized_from_ms"]`."""
    from kb_agent.evaluator.thresholds import STRICT_FEWEST_FRESH, STRICT_FRESH_MS

    most = ev.settings.strict_timed_trials
    parity = info.candidate.median_ms if info.candidate is not None else 0.0
    if ev.device.type != "cuda" or not parity > 0:
        return most
    info.settings.setdefault("strict", {})["sized_from_ms"] = parity
    return max(min(most, STRICT_FEWEST_FRESH), min(most, math.ceil(STRICT_FRESH_MS / parity)))


def judge_call(ev, inputs: list, before: list, out, what: str, seed: int, drawn: bool = False) -> None:
    """The checks of one call of the candidate outside the correctness trials: `inputs` as the call left
    them, `before` a copy of them as it got them, `out` its output. The output must match the reference's
    on `before` (`timing_outputs`), and the call must not have written its inputs where the reference
    does not (`inputs_unchanged`, `strict_trials.record_in_place`), and it must be a plain tensor
    (`exact_type`). As in the strict trials, values the reference raises on are no check, nor is the
    output where the reference's is not finite; but the reference may not raise on `drawn` values (a
    draw of `get_inputs()`) nor for want of memory (`strict_trials.reference_refused`). `seed`: the seed
    the RNGs had before the candidate's call, set again before the reference's (KernelBench's rule, so
    that a model drawing random numbers, dropout in training mode, meets the same draws)."""
    from kb_agent.evaluator.compare import compare_outputs, flatten_outputs
    from kb_agent.evaluator.stages.strict_trials import record_in_place, reference_call, reference_refused
    from kb_agent.evaluator.strict import changed_inputs, shadowed_methods

    torch = ev.torch
    record_tampering(ev, f"after {what}")
    # a plain tensor, as in the strict trials (`exact_type`): a subclass can compute when it is first
    # read, after the timed window, here (checked by type alone, before anything reads it)
    # (or a plain tensor with methods of its own, `strict.shadowed_methods`, which compute when read too)
    lazy = set()
    for t in flatten_outputs(out):
        if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
            lazy.add(type(t).__name__)
        elif isinstance(t, torch.Tensor) and (own := shadowed_methods(t)):
            lazy.add(f"torch.Tensor with attributes of its own over Tensor's ({', '.join(own[:4])})")
    ev.checks.record("exact_type", not lazy, f"the output of {what} was a {', '.join(sorted(lazy))}, not a plain "
                     "torch.Tensor: work deferred until the output is read?" if lazy else "")  # fmt: skip
    flat_before = flatten_outputs(before)
    changed = changed_inputs(torch, flatten_outputs(inputs), flat_before)
    # the reference writes a copy of its own only where the candidate's writes are to be compared with it
    ref_in = ev.clone(before) if changed else before
    set_seed(seed)
    try:
        expected = reference_call(ev, ref_in)
    except Exception as e:  # noqa: BLE001 - strict timing's offsets may leave its domain
        reference_refused(ev, e, what, drawn)
        _count(ev, "judged_calls_raised")
        return
    _count(ev, "judged_calls_checked")
    record_in_place(ev, flat_before, changed, flatten_outputs(ref_in), when=f" ({what})")
    if not all(torch.isfinite(t).all() for t in tensors(expected) if t.is_floating_point() or t.is_complex()):
        return  # nor where it is not finite on them, as in the strict trials
    r = compare_outputs(expected, out, ev.atol, ev.rtol, trial=-1, seed=-1)
    ev.checks.record("timing_outputs", r.passed,
                     f"the output of {what} was wrong ({r.problem}): an output cached or replayed for the "
                     "tensors it was timed with?")  # fmt: skip


def checked_call(ev, inputs: list, layout: list) -> None:
    """One more call on the tensors the candidate was timed with, after values freshly drawn from
    `get_inputs()` were written into them, outside any timing, judged as the last timed call
    (`judge_call`). Strict timing's fresh values are small offsets of the timed ones; these are new
    draws, under a seed no stage uses and no candidate can know (`strict_info["checked_call_seed"]`), so
    an output replayed for the timed tensors (told apart by identity, address, version or values near
    the ones it saw) or inputs restored to earlier values are caught. When the draw does not fit the
    timed arguments (`_write_draw`: a get_inputs() of random sizes) nothing is written and the
    floating-point tensors get strict timing's small offsets instead. `layout` as in `strict_timing`."""
    from kb_agent.evaluator import timing
    from kb_agent.evaluator.compare import flatten_outputs

    torch = ev.torch
    if _record_altered(ev, inputs, layout, "in the last timed call"):
        return
    seed = timing.entropy.randrange(2**31)
    ev.strict_info["checked_call_seed"] = seed
    drawn = _write_draw(ev, inputs, seed)
    if not drawn:
        gens = timing.seeded_generators(seed)
        for a in flatten_outputs(inputs):
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                timing.add_offsets(a, gens(a.device))
    before = ev.clone(inputs)  # the values the call gets, the reference's to change (not the problem's)
    collect_garbage(ev)
    with torch.no_grad():
        set_seed(seed)
        out = ev.new_model(*inputs)
        ev.sync()
    what = "a call on the timed tensors given freshly drawn values"
    judge_call(ev, inputs, before, out, what, seed=seed, drawn=drawn)
    if ev.strict_info.get("judged_calls_raised") and not ev.strict_info.get("judged_calls_checked"):
        ev.checks.record("reference_ran", False,
                         "the reference raised on the values of every call of the candidate's that strict timing "
                         "judged (strict_info['reference_raised']), so none of them was checked")  # fmt: skip


def _count(ev, key: str) -> None:
    ev.strict_info[key] = ev.strict_info.get(key, 0) + 1


def _fitting_draw(ev, inputs: list, seed: int) -> list | None:
    """`get_inputs()` under `seed` (the arguments, as drawn) where the draw fits the timed arguments
    `inputs` (`_fits`, as `_write_draw` has it), else None: strict timing's fresh values. None too, and
    `tampering` fails, where the candidate has by now changed what the draw relies on (the guarded
    modules' attributes, `torch.random.default_generator` among them, or a torch function or dispatch
    mode left active): such a draw could repeat the values it has cached outputs for, and the offsets of
    the harness's own generator serve instead."""
    from kb_agent.evaluator.compare import flatten_outputs

    # without the shallow objects (every torch module): this runs on the host right before a timed call,
    # whose launch is inside its events, and the fresh calls of an honest 50 us ReLU read 2x its repeated
    # ones once they came with it (toy/relu, H100, 2026-12-07; likely the host's caches); the reference
    # runs in strict timing only for a judged call, which is looked at in full first (`judge_call`)
    if record_tampering(ev, "seen while strict timing drew fresh inputs", shallow=False):
        return None
    set_seed(seed)
    drawn = ev.draw_inputs()
    flat, timed = flatten_outputs(drawn), flatten_outputs(inputs)
    fits = len(flat) == len(timed) and all(_fits(ev.torch, a, d) for a, d in zip(timed, flat, strict=True))
    return drawn if fits else None


def _write_draw(ev, inputs: list, seed: int) -> bool:
    """`get_inputs()` under `seed`, written into the tensors of `inputs` (in place; lists too) when the
    draw fits them: the same number of arguments, each tensor of the same shape and dtype, every other
    argument equal (values of one draw may only fit its own sizes: indices below a drawn length or a
    drawn int). Returns whether it was written; one drawn tensor beside `inputs` at a time."""
    from kb_agent.evaluator.compare import flatten_outputs

    torch = ev.torch
    set_seed(seed)
    drawn = flatten_outputs(ev.draw_inputs())
    timed = flatten_outputs(inputs)
    if not (len(drawn) == len(timed) and all(_fits(torch, a, d) for a, d in zip(timed, drawn, strict=True))):
        return False
    with torch.no_grad():  # (an input that requires grad is written as any other)
        for i, a in enumerate(timed):
            if isinstance(a, torch.Tensor):
                # (Tensor's own: `a` is the candidate's, see timing._copy_into)
                torch.Tensor.copy_(a, drawn[i])
            drawn[i] = None
    return True


def _layout(torch, values: list) -> list:
    from kb_agent.evaluator.compare import flatten_outputs
    from kb_agent.evaluator.timing import _layout_of

    return [_layout_of(a) for a in flatten_outputs(values) if isinstance(a, torch.Tensor)]


def _record_altered(ev, inputs: list, layout: list, when: str) -> bool:
    """Whether a timed tensor's shape, strides, dtype or device differ from `layout` (the candidate
    resized or restrided its own input: `resize_`, `as_strided_`, `set_`); if so `inputs_unchanged`
    fails, naming the first."""
    from kb_agent.evaluator.compare import flatten_outputs
    from kb_agent.evaluator.strict import shadowed_methods

    for i, a in enumerate(t for t in flatten_outputs(inputs) if isinstance(t, ev.torch.Tensor)):
        if own := shadowed_methods(a):
            ev.checks.record("inputs_unchanged", False,
                             f"input tensor {i} was given attributes of its own over Tensor's ({', '.join(own[:4])}) "
                             f"{when}: what the harness does with its inputs would run the candidate's code")  # fmt: skip
            return True
    current = _layout(ev.torch, inputs)
    if len(current) != len(layout):
        ev.checks.record("inputs_unchanged", False, f"the candidate's input tensors went from {len(layout)} to "
                         f"{len(current)} {when}: it changed a list argument in place")  # fmt: skip
        return True
    for i, (now, then) in enumerate(zip(current, layout, strict=True)):
        if now[4] is not then[4]:
            ev.checks.record("inputs_unchanged", False,
                             f"input tensor {i} was made a {now[4].__module__}.{now[4].__name__} {when}: what the "
                             "harness does with its inputs would run the candidate's code (helper-25)")  # fmt: skip
            return True
        if now != then:
            ev.checks.record("inputs_unchanged", False,
                             f"input tensor {i} changed {when} from shape {then[0]}, strides {then[1]} to shape "
                             f"{now[0]}, strides {now[1]}: the candidate resized or restrided its own input")  # fmt: skip
            return True
    return False


def _fits(torch, timed, drawn) -> bool:
    """Whether a drawn argument may replace a timed one: a tensor of the same shape and dtype, or an
    equal value of the same type (NaN never)."""
    if isinstance(timed, torch.Tensor):
        return isinstance(drawn, torch.Tensor) and drawn.shape == timed.shape and drawn.dtype == timed.dtype
    try:
        return type(drawn) is type(timed) and bool(drawn == timed)
    except Exception:  # noqa: BLE001 - a comparison that is no bool
        return False


def _launches(ev) -> int | None:
    """The kernel probe's count of custom launches so far (strict mode), else None."""
    probe = getattr(ev, "probe", None) if ev.strict else None
    return None if probe is None else probe.launches


def check_timed_launches(ev, before: int | None, calls: int) -> None:
    """`custom_kernels_do_the_work` in the calls that are timed: where the kernel probe's call launched
    custom kernels, the parity figure's `calls` calls (warm-up included) must launch at least one a
    call. A candidate that launched its kernel only while probed (the probe's hook on Triton's launcher
    was a tell: it came and went) and called PyTorch otherwise had PyTorch's speed taken for its
    kernel's: 1.68x on a GEMM with a residual, by one addmm (helper-34). Launches are counted by the
    probe's hooks, which stay on (`KernelProbe.install_triton`, the wrapped extension functions)."""
    if before is None:
        return
    launched, per_call = ev.probe.launches - before, getattr(ev, "probe_launches", 0)
    ev.strict_info["timed_launches"] = {"calls": calls, "launches": launched, "probe_call": per_call}
    if per_call and launched < calls:
        ev.checks.record("custom_kernels_do_the_work", False,
                         f"its custom kernels launched {per_call} time(s) in the kernel probe's call but {launched} "
                         f"time(s) in the {calls} calls of the parity timing: the calls that are timed must run "
                         "them")  # fmt: skip
