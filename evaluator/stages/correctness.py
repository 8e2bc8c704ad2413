"""The correctness stage: KernelBench's trials, fresh inputs from each trial's seed, reference vs candidate."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from kb_agent.evaluator.context import (
    INTERPRETER_BF16,
    Verdict,
    describe_exception,
    record_tampering,
    set_seed,
)
from kb_agent.evaluator.result import CorrectnessInfo, Status
from kb_agent.evaluator.strict import collect_garbage


def run(ev) -> None:
    from kb_agent.evaluator.compare import compare_outputs
    from kb_agent.evaluator.strict import dispatched_ops

    torch = ev.torch
    ev.chan.send("stage", name="correctness")
    t0 = time.perf_counter()
    info = CorrectnessInfo(trials=ev.settings.correctness_trials, atol=ev.atol, rtol=ev.rtol,
                           seed=ev.settings.seed)  # fmt: skip
    torch.manual_seed(ev.settings.seed)  # trial seeds drawn as KernelBench draws them
    seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(ev.settings.correctness_trials)]
    verdict = None
    for i, s in enumerate(seeds):
        set_seed(s)
        inputs = ev.draw_inputs()
        with torch.no_grad():
            try:
                set_seed(s)
                watch = i == 0 and ev.strict and ev.dispatch_guard is not None
                ops: set[str] = set()
                with dispatched_ops(ops) if watch else contextlib.nullcontext():
                    expected = ev.ref_model(*ev.clone(inputs))
                ev.sync()
                if (
                    watch
                ):  # the reference's own ops are compared after every call of the candidate from now on
                    ev.dispatch_guard.watch(ops)
            except Exception as e:
                raise Verdict(Status.RUNTIME_ERROR, "the reference failed on its own inputs (not the "
                              "candidate's fault): " + describe_exception(e, "")) from None  # fmt: skip
            if i == 0 and ev.pinned is not None:  # what a reference's first call sets up is its own
                ev.pinned.repin_reference(ev)
            try:
                collect_garbage(ev)
                set_seed(s)
                actual = ev.new_model(*ev.clone(inputs))
                ev.sync()
            except BaseException as e:  # noqa: BLE001
                verdict = ev.runtime_verdict(e, f"running correctness trial {i + 1}")
                break
        if ev.strict:
            record_tampering(
                ev, f"after its forward (correctness trial {i + 1}): the comparison would run through it"
            )

        def again(s=s, inputs=inputs):  # a second call on the same inputs, made only to diagnose a mismatch
            set_seed(s)
            with torch.no_grad():
                out = ev.new_model(*ev.clone(inputs))
            ev.sync()
            return out

        r = compare_outputs(expected, actual, ev.atol, ev.rtol, i, s, inputs=inputs, rerun=again)
        info.results.append(r)
        if not r.passed:
            message = f"output mismatch in correctness trial {i + 1} of {len(seeds)} ({r.problem})"
            if (
                ev.settings.precision == "bf16"
                and os.environ.get("TRITON_INTERPRET") == "1"
                and "triton" in ev.candidate_src
            ):
                message += f"\n{INTERPRETER_BF16}"
            verdict = Verdict(Status.INCORRECT, message)
            break
        info.passed += 1
    info.seconds = time.perf_counter() - t0
    ev.chan.send("correctness", correctness=dataclasses.asdict(info))
    if verdict:
        raise verdict
