import io

from kb_agent.agent.render import eval_summary
from kb_agent.evaluator.result import EvalResult, KernelRow, ProfileInfo, Status, TimingInfo, TimingStats
from rich.console import Console


def shown(result: EvalResult) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(eval_summary(result))
    return console.export_text()


def test_a_rejected_result_shows_its_kernelbench_verdict_and_library_share():
    stats = TimingStats(mean_ms=1.0, median_ms=1.0, std_ms=0.0, min_ms=1.0, max_ms=1.0, trials=10)
    rejected = EvalResult(
        Status.REJECTED,
        "rejected by strict mode:\n- custom_kernels_do_the_work: custom kernels took 2% of the GPU time",
        timing=TimingInfo(method="cuda_event", reference=stats, candidate=stats, speedup=1.02),
        profile=ProfileInfo(
            kernels=[
                KernelRow("sm90_gemm", 1, 98.0, 98.0, 0.98, False),
                KernelRow("fused_tail", 1, 2.0, 2.0, 0.02, True),
            ],
            total_us=100.0,
            custom_kernel_ran=True,
            custom_share=0.02,
        ),
        strict={"enabled": True, "parity_status": "correct", "checks": {}},
    )
    text = shown(rejected)
    assert "under KernelBench's rules alone: correct (1.020x)" in text
    assert "GPU kernels in one forward (library share 98%)" in text
    # a result that both rules judge alike says nothing more
    assert "KernelBench's rules alone" not in shown(EvalResult(Status.INCORRECT, "mismatch"))


def test_a_slow_candidate_shows_its_speedup_not_0_000x():
    # `kb-agent eval triton_relu.py --problem toy/relu --device cpu` printed 0.000x (it is about 0.0003x)
    ref = TimingStats(mean_ms=0.0032, median_ms=0.0031, std_ms=0.0, min_ms=0.003, max_ms=0.004, trials=100)
    cand = TimingStats(mean_ms=10.0, median_ms=10.0, std_ms=0.1, min_ms=9.9, max_ms=10.2, trials=100)
    r = EvalResult(Status.CORRECT, timing=TimingInfo(method="cpu_perf_counter", reference=ref, candidate=cand,
                                                     speedup=0.00032))  # fmt: skip
    text = shown(r)
    assert "0.00032x" in text and "0.000x" not in text
