"""The child of Nsight Compute's pass (`evaluator.ncu`): the candidate's forwards, profiled by the `ncu`
this process runs under, and nothing else.

The build stage imports the reference and the candidate (an identical source reuses its cached build)
and constructs both models, as an evaluation does; then, with the seed and inputs the timing stage uses
(`set_seed(settings.seed)`, `Evaluation.draw_inputs`), the job's "warmup" forwards run outside the profiled
range and its "forwards" inside it (cudaProfilerStart / cudaProfilerStop: ncu runs with
`--profile-from-start off`). The inputs are cloned before the range, so no copy kernel lands in it.
Sends "ncu_forwards" ({"forwards": n, "seconds": wall seconds of the range}) and the verdict: "correct"
when the forwards ran, else the status the failure gives (the parent only reports it; nothing is judged).
"""

from __future__ import annotations

import os
import time

from kb_agent.evaluator.context import Verdict, set_seed
from kb_agent.evaluator.result import Status


def run(ev, warmup: int = 2, forwards: int = 1) -> None:
    """`warmup` forwards outside the profiled range, then `forwards` inside it (see the module docstring)."""
    from kb_agent.evaluator.hardware import hardware_record
    from kb_agent.evaluator.stages import build

    torch = ev.torch
    hw = hardware_record(ev.device, ev.settings.precision)
    ev.arch = hw.compute_capability or "9.0"
    if hw.arch_list:
        os.environ["TORCH_CUDA_ARCH_LIST"] = hw.arch_list  # as the evaluation built it: the same cache key
    send = ev.chan.send
    try:
        build.run(ev)
        send("stage", name="ncu")
        set_seed(ev.settings.seed)
        inputs = ev.draw_inputs()
        with torch.no_grad():
            try:
                for _ in range(warmup):
                    ev.new_model(*ev.clone(inputs))
                calls = [ev.clone(inputs) for _ in range(forwards)]
                ev.sync()
                cuda = ev.device.type == "cuda"  # on the CPU (tests of the plumbing) nothing is profiled
                t0 = time.perf_counter()
                if cuda:
                    torch.cuda.profiler.start()
                for args in calls:
                    ev.new_model(*args)
                ev.sync()
                if cuda:
                    torch.cuda.profiler.stop()
            except BaseException as e:  # noqa: BLE001
                raise ev.runtime_verdict(e, "running the candidate under Nsight Compute") from None
        send("ncu_forwards", forwards=forwards, seconds=time.perf_counter() - t0)
        send("done", status=str(Status.CORRECT), message="profiled")
    except Verdict as v:
        send("done", status=str(v.status), message=v.message)
