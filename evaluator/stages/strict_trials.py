"""Strict mode's extra correctness trials (poisoned memory, inputs off the declared distribution) and the
checks that need a reference forward: the reference's own ops recomputed, the speed-of-light inputs."""

from __future__ import annotations

import itertools
from typing import Any

from kb_agent.evaluator.context import set_seed, tensors


def run(ev) -> None:
    """Extra correctness trials: candidate first on poisoned memory with fresh inputs, then inputs
    outside the declared distribution; inputs must come back unchanged; outputs must be plain tensors
    of the reference's dtype within a relative error of the output's own scale."""
    from kb_agent.evaluator.compare import compare_outputs
    from kb_agent.evaluator.strict import alternative_inputs, exact_types, relative_error
    from kb_agent.evaluator.thresholds import MAX_RELATIVE_ERROR
    from kb_agent.evaluator.timing import early_read

    torch = ev.torch
    seed = ev.settings.seed + 1_000_003  # not one of the parity trials' seeds
    set_seed(seed)
    base = ev.draw_inputs()
    check_not_pytorch(ev, base)
    trials = itertools.chain([("candidate_first", base)], alternative_inputs(base, torch))  # one set alive
    max_rel = MAX_RELATIVE_ERROR[ev.settings.precision]
    for name, inputs in trials:
        cand_in = ev.clone(inputs)  # `inputs` itself only reaches the reference as a clone
        with torch.no_grad():
            poison_free_memory(ev)
            try:
                actual = ev.new_model(*cand_in)
                sample = early_read(actual) if ev.device.type == "cuda" else None  # before any sync
                ev.sync()
            except BaseException as e:  # noqa: BLE001
                raise ev.runtime_verdict(e, f"running the strict trial '{name}'") from None
            if sample is not None:
                late = sample.changed()
                ev.checks.record("output_ready_on_stream", not late,
                                 f"{late} sampled output element(s), read on the current stream right after "
                                 f"forward returned (strict trial '{name}'), changed after a device-wide "
                                 "synchronize: the output is computed on a stream the current stream does not "
                                 "wait for (join it back with wait_stream or an event)")  # fmt: skip
            try:
                expected = ev.ref_model(*ev.clone(inputs))
                ev.sync()
            except Exception:
                continue  # the reference itself does not accept these inputs: no trial
        changed = [i for i, (a, b) in enumerate(zip(cand_in, inputs, strict=True))
                   if isinstance(a, torch.Tensor) and not torch.equal(a, b)]  # fmt: skip
        ev.checks.record("inputs_unchanged", not changed, f"modified input(s) {changed} in place")
        if name != "candidate_first" and not all(
            torch.isfinite(t).all() for t in tensors(expected) if t.is_floating_point()
        ):
            continue  # outside the problem's domain: the reference is not finite there
        bad_type = exact_types(expected, actual)
        ev.checks.record("exact_type", bad_type is None, bad_type or "")
        r = compare_outputs(expected, actual, ev.atol, ev.rtol, trial=-1, seed=seed)
        rel = relative_error(expected, actual)
        # on the declared distribution the parity tolerance applies; off it, outputs grow with the
        # inputs while atol does not, so an honest kernel is judged by its error relative to the scale
        passed = (
            r.passed
            if name == "candidate_first"
            else (rel is None or rel <= max_rel) and r.problem != "shape"
        )
        ev.checks.record(f"trial_{name}", passed,
                           f"wrong on {name} inputs: {r.problem}, {r.mismatched} of {r.numel} elements "
                           f"off, max abs diff {r.max_abs_diff}, relative error {rel}")  # fmt: skip
        ev.checks.record("relative_error", rel is None or rel <= max_rel,
                           f"relative error {rel:.3g} on {name} inputs exceeds {max_rel:g} (an output that "
                           "ignores the input's scale, e.g. zeros or a constant?)" if rel is not None else "")  # fmt: skip
        if name == "candidate_first" and ev.device.type == "cuda":
            record_speed_of_light_inputs(ev, inputs, expected)
        del actual, expected, cand_in


def poison_free_memory(ev) -> None:
    """Fill the CUDA caching allocator's free blocks with NaN, so memory a candidate gets back from it
    holds no earlier result (the reference's output in particular)."""
    torch = ev.torch
    if ev.device.type != "cuda":
        return
    free = torch.cuda.memory_reserved(ev.device) - torch.cuda.memory_allocated(ev.device)
    if free > 0:
        filler = torch.empty(free // 4, dtype=torch.float32, device=ev.device)
        filler.fill_(float("nan"))
        del filler
    ev.sync()


def check_not_pytorch(ev, inputs: list) -> None:
    """The candidate must not compute the answer with the reference's own PyTorch ops."""
    from kb_agent.evaluator.strict import reference_ops_recomputed, torch_ops

    try:
        ref_ops = torch_ops(ev.ref_model, ev.clone(inputs))
        cand_ops = torch_ops(ev.new_model, ev.clone(inputs))
    except Exception as e:  # a profiler failure is no verdict on the candidate
        ev.strict_info["torch_ops_error"] = f"{type(e).__name__}: {e}"
        return
    recomputed = reference_ops_recomputed(ref_ops, cand_ops)
    ev.strict_info["candidate_torch_ops"] = sorted(cand_ops)
    ev.checks.record("not_the_reference_ops", not recomputed,
                       f"calls the reference's own PyTorch ops ({', '.join(recomputed)}): the custom kernels "
                       "must do the work")  # fmt: skip


def record_speed_of_light_inputs(ev, inputs: list, expected: Any) -> None:
    from kb_agent.evaluator.strict import count_bytes, count_flops, measure_bandwidth, speed_of_light_ms

    try:
        nbytes = count_bytes(inputs) + count_bytes(expected)
        flops = count_flops(ev.ref_model, ev.clone(inputs))
        bw = measure_bandwidth(ev.device)
        floor = speed_of_light_ms(nbytes, flops, bw, ev.arch, ev.settings.precision)
        ev.strict_info["speed_of_light"] = {"bytes": nbytes, "flops": flops, "bandwidth_Bps": bw,
                                              "floor_ms": floor}  # fmt: skip
    except Exception as e:  # the floor is a check, not a verdict: record why it is missing
        ev.strict_info["speed_of_light"] = {"error": f"{type(e).__name__}: {e}"}
