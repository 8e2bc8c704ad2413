"""Strict mode's extra correctness trials (poisoned memory, inputs off the declared distribution) and the
checks that need a reference forward: the reference's work done by library ops, whether the custom
kernels do any of it (`evaluator.kernel_probe`), the speed-of-light inputs."""

from __future__ import annotations

import functools
import itertools
from typing import Any

from kb_agent.evaluator.context import record_tampering, set_seed, tensors
from kb_agent.evaluator.strict import collect_garbage


def run(ev) -> None:
    """Extra correctness trials (`extra_trials`), then the custom-kernel probe (`check_custom_kernels`),
    once the trials' tensors are gone: the probe's snapshots need the room (on an 80 GB GPU, the trials'
    inputs and outputs still alive beside them ran an honest 6 GiB ReLU out of memory)."""
    extra_trials(ev)
    ev.stage_peak("strict_trials")
    check_custom_kernels(ev)
    ev.stage_peak("kernel_probe")


def extra_trials(ev) -> None:
    """Candidate first on poisoned memory with fresh inputs, then inputs outside the declared
    distribution; inputs must come back unchanged; outputs must be plain tensors of the reference's
    dtype within a relative error of the output's own scale. One trial's tensors are alive at a time."""
    from kb_agent.evaluator.strict import alternative_inputs

    seed = ev.settings.seed + 1_000_003  # not one of the parity trials' seeds
    set_seed(seed)
    base = ev.draw_inputs()
    check_not_pytorch(ev, base)
    _trial(ev, "candidate_first", base, seed)
    for name, inputs in alternative_inputs(base, ev.torch, ev.settings.precision):
        _trial(ev, name, inputs, seed)
        del inputs  # before the next set is drawn: base and one other set alive


def _trial(ev, name: str, inputs: list, seed: int) -> None:
    """One strict trial on `inputs` (which only reach the reference as a clone); what it records goes to
    `ev.checks`. Its tensors die with the call."""
    from kb_agent.evaluator.compare import compare_outputs, flatten_outputs, relative_error
    from kb_agent.evaluator.strict import changed_inputs, exact_types
    from kb_agent.evaluator.thresholds import MAX_RELATIVE_ERROR
    from kb_agent.evaluator.timing import early_read

    torch = ev.torch
    cand_in = ev.clone(inputs)
    with torch.no_grad():
        collect_garbage(ev)
        poison_free_memory(ev)
        try:
            set_seed(seed)  # before each model's call, as in KernelBench's trials (dropout draws the same)
            actual = ev.new_model(*cand_in)
            sample = early_read(actual) if ev.device.type == "cuda" else None  # before any sync
            ev.sync()
        except BaseException as e:  # noqa: BLE001
            raise ev.runtime_verdict(e, f"running the strict trial '{name}'") from None
        record_tampering(ev, f"after its forward (strict trial '{name}')")
        if sample is not None:
            late = sample.changed()
            ev.checks.record("output_ready_on_stream", not late,
                             f"{late} sampled output element(s), read on the current stream right after "
                             f"forward returned (strict trial '{name}'), changed after a device-wide "
                             "synchronize: the output is computed on a stream the current stream does not "
                             "wait for (join it back with wait_stream or an event)")  # fmt: skip
            del sample
        # the candidate's copy of the inputs dies before the reference's is made (one copy fewer at the
        # peak), but for the inputs it changed, which are held to what the reference does to its own copy
        changed = changed_inputs(torch, flatten_outputs(cand_in), flatten_outputs(inputs))
        del cand_in
        ref_in = ev.clone(inputs)
        set_seed(seed)
        try:
            expected = reference_call(ev, ref_in)
        except Exception as e:  # noqa: BLE001 - the reference itself does not accept these inputs: no trial
            reference_refused(ev, e, f"the strict trial '{name}'", drawn=name == "candidate_first")
            return
        record_in_place(ev, flatten_outputs(inputs), changed, flatten_outputs(ref_in))
        del changed, ref_in
    if name != "candidate_first" and not all(
        torch.isfinite(t).all() for t in tensors(expected) if t.is_floating_point()
    ):
        return  # outside the problem's domain: the reference is not finite there
    bad_type = exact_types(expected, actual)
    ev.checks.record("exact_type", bad_type is None, bad_type or "")
    rel = relative_error(expected, actual)  # infinite for outputs of another shape
    max_rel = MAX_RELATIVE_ERROR[ev.settings.precision]
    rel_ok = rel is None or rel <= max_rel
    # on the declared distribution the parity tolerance applies; off it, outputs grow with the inputs
    # while atol does not, so an honest kernel is judged by its error relative to the scale (and the
    # element-wise account is taken only to say what failed)
    account = functools.partial(compare_outputs, expected, actual, ev.atol, ev.rtol, trial=-1, seed=seed)
    if name == "candidate_first":
        r = account()
        passed = r.passed
    else:
        passed = rel_ok
        r = None if passed else account()
    extra = _nonfinite(r)
    ev.checks.record(f"trial_{name}", passed, "" if passed else
                       f"wrong on {name} inputs: {r.problem}, {r.mismatched} of {r.numel} elements "
                       f"off{extra or ''}, max abs diff {r.max_abs_diff} (finite elements), relative error {rel}")  # fmt: skip
    hint = ("an overflow, e.g. exp of large inputs without the max subtracted?" if extra else
            "an output that ignores the input's scale, e.g. zeros or a constant?")  # fmt: skip
    ev.checks.record("relative_error", rel_ok,
                     f"relative error {rel:.3g} on {name} inputs exceeds {max_rel:g}{extra or ''} ({hint})"
                     if rel is not None else "")  # fmt: skip
    if name == "candidate_first" and ev.device.type == "cuda":
        record_speed_of_light_inputs(ev, inputs, expected)


def _nonfinite(r) -> str:
    """ ", N NaN and M infinite output elements where the reference has K" for a trial's comparison `r`
    (a `TrialResult`, or None) whose output has more non-finite elements than the reference's, else ""
    (a NaN-filled output read "max abs diff 1.19e-07, relative error inf": helper-26)."""
    if r is None or r.nan_actual + r.inf_actual <= r.nan_expected + r.inf_expected:
        return ""
    return (f", {r.nan_actual} NaN and {r.inf_actual} infinite output elements where the reference has "
            f"{r.nan_expected + r.inf_expected}")  # fmt: skip


def reference_call(ev, ref_in: list):
    """The reference's output on `ref_in` (synchronized), for a check of a candidate's call, under a
    no_grad of its own: a forward that switched grad mode on (`torch.set_grad_enabled(True)`) inside
    the harness's no_grad had the reference record autograd there, a saved-tensors hook of the
    candidate's NaN-filled its output, and a strict trial was skipped (helper-30). Out of device memory,
    the caching allocator's free blocks go back to the driver and it runs once more (the harness's own
    copies beside the candidate's tensors can fragment the cache); what that raises is the caller's
    (`reference_refused`)."""
    from kb_agent.evaluator.context import is_oom

    torch = ev.torch
    with torch.no_grad():
        try:
            expected = ev.ref_model(*ref_in)
            ev.sync()
            return expected
        except Exception as e:  # noqa: BLE001
            if not (is_oom(e) and ev.device.type == "cuda"):
                raise
        torch.cuda.empty_cache()
        expected = ev.ref_model(*ref_in)
        ev.sync()
        return expected


def reference_refused(ev, e: BaseException, what: str, drawn: bool) -> None:
    """The reference raised `e` on the values of `what` (a judged call or a strict trial): no check of
    that call's output. Where the values may lie outside the reference's domain (strict timing's
    offsets, the signed and scaled trials) that is allowed and recorded
    (`strict_info["reference_raised"]`); it fails `reference_ran` where they cannot (`drawn`: a draw of
    `get_inputs()`, as in the correctness trials, where the reference ran) or where the exception comes
    from the process's state rather than the values (out of memory even after `reference_call`'s retry,
    the recursion limit, a warning filter's "error"). A candidate that made the reference raise exactly
    there (a `random.seed` of its own that raised when the harness seeded for the reference) had every
    judged call and every scaled trial go unchecked: a replayed output passed, 2122x (helper-27)."""
    from kb_agent.evaluator.context import describe_exception, is_oom

    error = describe_exception(e, "", limit=300)
    ev.strict_info.setdefault("reference_raised", []).append({"call": what, "error": error})
    if drawn:
        why = "values drawn from get_inputs(), which it ran on in the correctness trials"
    elif isinstance(e, (RecursionError, Warning)) or is_oom(e):  # is_oom: MemoryError too
        why = "an error of the process's state (memory, the recursion limit, warnings made errors), not of the values"
    else:
        return
    ev.checks.record("reference_ran", False,
                     f"the reference raised on {what} ({error}), {why}: something the candidate left in the "
                     "process (memory held, a limit, a replaced function) made it fail, and the call went "
                     "unchecked")  # fmt: skip


def record_in_place(ev, before: list, changed: dict, reference_after: list, when: str = "") -> None:
    """The `inputs_unchanged` check of one call: `changed` (index -> the candidate's tensor after the
    call) are the inputs it wrote, held to what the reference did to its copy of `before`
    (`strict.in_place_mismatches`); all three flat (`compare.flatten_outputs`: tensors inside list
    arguments counted in order); `when` names the call in the detail."""
    from kb_agent.evaluator.strict import in_place_mismatches

    bad = in_place_mismatches(ev.torch, before, changed, reference_after, ev.atol, ev.rtol)
    ev.checks.record("inputs_unchanged", not bad,
                     f"modified input(s) {bad} in place{when}, where the reference leaves them unchanged or "
                     "ends with other values")  # fmt: skip


def poison_free_memory(ev) -> None:
    """Fill the CUDA caching allocator's free blocks with NaN, so memory a candidate gets back from it
    holds no earlier result (the reference's output in particular).

    Each free block of the current device is taken by an allocation of its own size, largest first (the
    allocator hands out the best-fitting cached block, so that is the block itself), filled, and all are
    given back. One allocation of the whole free total (as before) fits no single block when the cache
    is fragmented: the allocator then asked the driver for a new segment of that size, poisoned none of
    the cached blocks, and on a GPU shared with other jobs ran out of memory (seen on the H200: 'Tried to
    allocate 6.77 GiB' failed an honest candidate's evaluation). The evaluator's own poisoning never ends
    an evaluation: a block it cannot take is recorded in `strict_info["poison_skipped_bytes"]`.
    """
    torch = ev.torch
    if ev.device.type != "cuda":
        return
    index = ev.device.index if ev.device.index is not None else torch.cuda.current_device()
    try:
        sizes = sorted(
            (b["size"] for seg in torch.cuda.memory_snapshot() if seg.get("device") == index
             for b in seg.get("blocks", ()) if b.get("state") == "inactive" and b.get("size", 0) >= 4),
            reverse=True,
        )  # fmt: skip
    except Exception:  # noqa: BLE001 - no snapshot: poison what one allocation of the free total reaches
        sizes = []
    if not sizes:  # nor a snapshot that names no free block where the allocator holds free bytes
        sizes = [torch.cuda.memory_reserved(ev.device) - torch.cuda.memory_allocated(ev.device)]
    fillers, skipped = [], 0
    for size in sizes:
        if size < 4:
            continue
        try:
            filler = torch.empty(size // 4, dtype=torch.float32, device=ev.device)
        except torch.OutOfMemoryError:
            skipped += size
            continue
        filler.fill_(float("nan"))
        fillers.append(filler)
    del fillers
    if skipped:
        ev.strict_info["poison_skipped_bytes"] = ev.strict_info.get("poison_skipped_bytes", 0) + skipped
    ev.sync()


def check_not_pytorch(ev, inputs: list) -> None:
    """The candidate's PyTorch/library ops must do a strict part of the reference's work (a kind of work
    left out, or less of it): a library GEMM beside a custom epilogue passes; the reference's whole
    computation in PyTorch, beside a decoy or a copying kernel, does not (`strict.library_does_all_the_work`).
    The work of both is recorded (`library_work`)."""
    from kb_agent.evaluator.compare import compare_outputs
    from kb_agent.evaluator.strict import library_does_all_the_work, library_work

    seed, expected, actual = ev.settings.seed + 3_000_017, [], []
    try:
        set_seed(seed)
        ref_work = library_work(ev.ref_model, ev.clone(inputs), expected)
    except Exception as e:  # the reference's op count failing is no verdict on the candidate
        ev.strict_info["torch_ops_error"] = f"reference: {type(e).__name__}: {e}"
        return
    try:
        set_seed(seed)
        cand_work = library_work(ev.new_model, ev.clone(inputs), actual)
        ev.sync()
    except Exception as e:  # noqa: BLE001 - a forward that fails only while its ops are counted (helper-31)
        ev.strict_info["torch_ops_error"] = f"candidate: {type(e).__name__}: {e}"
        ev.checks.record("not_the_reference_ops", False,
                         f"its forward raised while its PyTorch ops were counted ({type(e).__name__}: "
                         f"{str(e)[:200]}), and ran without error otherwise")  # fmt: skip
        return
    # what was counted must be the answer: a forward that skipped its library ops while counted, and
    # returned anything, passed (helper-34)
    r = compare_outputs(expected[0], actual[0], ev.atol, ev.rtol, trial=-1, seed=seed)
    del expected, actual
    if not r.passed:
        ev.checks.record("not_the_reference_ops", False,
                         f"its output while its PyTorch ops were counted was wrong ({r.problem}), and right "
                         "otherwise: the ops counted were not the ones that make its answer")  # fmt: skip
        return
    everything = library_does_all_the_work(ref_work, cand_work)
    ev.strict_info["candidate_torch_ops"] = sorted(cand_work)
    ev.strict_info["library_work"] = {"reference": ref_work, "candidate": cand_work}
    ev.checks.record("not_the_reference_ops", not everything,
                     f"its PyTorch/library ops do all of the reference's work ({', '.join(everything)}, each in at "
                     "least the reference's amount): the custom kernels must do part of it")  # fmt: skip


def check_custom_kernels(ev) -> None:
    """`custom_kernels_do_the_work`: a custom kernel ran, its results reach the output, and it does more
    than copy (see `evaluator.kernel_probe`). Passes over fresh input values: observe, then poison; when
    every launch only copied, observe again on the signed and larger inputs before saying so."""
    from kb_agent.evaluator.kernel_probe import output_is_an_input, output_unchanged, verdict
    from kb_agent.evaluator.strict import alternative_inputs

    probe, torch = getattr(ev, "probe", None), ev.torch
    if probe is None:
        return
    seed = ev.settings.seed + 2_000_003  # values no earlier call saw (a kept output buffer shows its writes)

    def observe_pass(inputs):
        with torch.no_grad(), probe.passing("observe") as facts:
            ev.new_model(*ev.clone(inputs))
            ev.sync()
        return facts

    # the candidate runs first, on poisoned free memory: an output buffer it takes from the allocator never
    # holds the answer already (the reference's freed output), which would read as a launch that wrote nothing
    set_seed(seed)
    inputs = ev.draw_inputs()
    collect_garbage(ev)
    poison_free_memory(ev)
    try:
        observed = [observe_pass(inputs)]
    except BaseException as e:  # noqa: BLE001
        raise ev.runtime_verdict(e, "running the custom-kernel probe (observe pass)") from None
    with torch.no_grad():
        expected = ev.ref_model(*ev.clone(inputs))
    identity = output_is_an_input(torch, expected, inputs)
    del expected
    copies_only = all(x.copy for x in observed[0].launches)  # no launch at all included
    ev.probe_launches = len(observed[0].launches)  # what the timing stage's calls are held to
    if not copies_only:
        inputs = None  # only a look again (below) needs them: not alive beside the poison pass's
    set_seed(seed + 1)
    other = ev.draw_inputs()
    collect_garbage(ev)
    poison_free_memory(ev)
    unchanged, poison_error, out = None, None, None
    try:
        with torch.no_grad(), probe.passing("poison") as poisoned:
            set_seed(seed + 2)  # both models draw alike (dropout), so only the poison tells them apart
            out = ev.new_model(*ev.clone(other))
            ev.sync()
    except Exception as e:  # the poisoned values reached the candidate's control flow: they matter
        poison_error = f"{type(e).__name__}: {str(e)[:200]}"
    if poison_error is None:
        with torch.no_grad():
            set_seed(seed + 2)
            expected = ev.ref_model(*ev.clone(other))
        unchanged = output_unchanged(torch, out, expected, ev.atol, ev.rtol)
        del expected
    del out, other
    if observed[0].launches and copies_only:
        for name, alt in itertools.islice(alternative_inputs(inputs, torch, ev.settings.precision), 2):
            poison_free_memory(ev)
            try:
                observed.append(observe_pass(alt))
            except Exception as e:  # noqa: BLE001 - off the declared inputs a candidate may refuse
                ev.strict_info.setdefault("kernel_probe_errors", []).append(f"{name}: {type(e).__name__}")
            del alt
    unseen = unseen_custom_kernels(ev, inputs) if not observed[0].launches else None
    passed, detail = verdict(observed, poisoned, unchanged, identity, bool(unseen))
    ev.strict_info["kernel_probe"] = {
        "unseen_custom_kernels": unseen,
        "observe": [f.as_dict() for f in observed],
        "poison": {**poisoned.as_dict(), "output_unchanged": unchanged, "error": poison_error},
        "reference_is_identity": identity,
    }
    ev.checks.record("custom_kernels_do_the_work", passed, detail)


def unseen_custom_kernels(ev, inputs: list) -> list[str] | None:
    """On a GPU, the kernels of one forward whose names no library uses (`profile.is_library_kernel`):
    custom kernels launched where the probe cannot see them (a CUDA graph replay, a precompiled Triton
    kernel). None on a CPU or when the profile fails."""
    from kb_agent.evaluator.profile import is_library_kernel, profile_forward

    if ev.device.type != "cuda":
        return None
    try:
        prof = profile_forward(ev.new_model, ev.clone(inputs), max_rows=1000)
    except Exception:  # noqa: BLE001 - no profile, no evidence
        return None
    return [k.name[:80] for k in prof.kernels if not is_library_kernel(k.name)]


def record_speed_of_light_inputs(ev, inputs: list, expected: Any) -> None:
    """The problem's floor (`strict.speed_of_light`): unique bytes of the inputs and the output together
    (an output aliasing an input counts once), at the measured copy bandwidth; applied in the timing stage."""
    from kb_agent.evaluator.strict import count_bytes, count_flops, measure_bandwidth, speed_of_light

    try:
        nbytes = count_bytes(inputs, expected)
        flops = count_flops(ev.ref_model, ev.clone(inputs))
        bw = measure_bandwidth(ev.device)
        ev.strict_info["speed_of_light"] = speed_of_light(nbytes, flops, bw, ev.arch, ev.settings.precision)
    except Exception as e:  # the floor is a check, not a verdict: record why it is missing
        ev.strict_info["speed_of_light"] = {"error": f"{type(e).__name__}: {e}"}
