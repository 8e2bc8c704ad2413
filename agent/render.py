"""Human-readable (rich) views of evaluator results for the CLI."""

from __future__ import annotations

from kb_agent.agent.feedback import trial_line
from kb_agent.agent.store.rows import verdict_columns
from kb_agent.evaluator.result import EvalResult, Status, TimingStats
from rich.console import Group
from rich.table import Table
from rich.text import Text

_STYLE = {Status.CORRECT: "bold green", Status.INCORRECT: "bold yellow", Status.TIMEOUT: "bold magenta"}


def _ms(s: TimingStats | None) -> str:
    if s is None:
        return "-"
    return f"{s.mean_ms:.4f} (median {s.median_ms:.4f}, std {s.std_ms:.4f}, min {s.min_ms:.4f}, max {s.max_ms:.4f})"


def _speedup(x: float) -> str:
    """As `1.235x`; below 0.01x with two significant digits (`0.00032x`: a CPU run's Triton kernel under
    the interpreter), never `0.000x`."""
    return f"{x:.3f}x" if x >= 0.01 or x <= 0 else f"{x:.2g}x"


def _problem_label(p: dict) -> str:
    level = p.get("level")
    if level is None:
        return "(file)"
    return "toy" if level == 0 else f"{level}/{p.get('problem_id')}"


def eval_summary(r: EvalResult) -> Group:
    """Status, message, timing and profile of one evaluation, for a terminal."""
    parts: list = []
    p = r.problem
    head = Text.assemble(
        (f"{r.status}", _STYLE.get(r.status, "bold red")),
        f"   problem {_problem_label(p)} {p.get('name')}   backend {r.backend}   "
        f"device {r.device}   precision {r.precision}",
    )
    parts.append(head)
    if r.status != Status.CORRECT:
        parts.append(Text(r.message))
    verdict = verdict_columns(str(r.status), r.to_dict())
    if verdict["parity_status"] != str(r.status):
        speedup = (
            f" ({_speedup(r.timing.speedup)})"
            if verdict["parity_status"] == "correct" and r.timing.speedup
            else ""
        )
        parts.append(
            Text(f"under KernelBench's rules alone: {verdict['parity_status']}{speedup}", style="bold")
        )
    c = r.correctness
    if c.results:
        parts.append(Text(f"correctness: {c.passed}/{c.trials} trials passed (atol {c.atol}, rtol {c.rtol})"))
        bad = [t for t in c.results if not t.passed]
        if bad:
            t = bad[0]
            parts.append(Text(f"  trial {t.trial + 1}: {trial_line(t)}"))
    tm = r.timing
    if tm.candidate:
        table = Table(
            "figure", "reference ms", "candidate ms", "speedup", title=f"timing ({tm.method}, mean)"
        )
        table.add_row("parity (mean)", _ms(tm.reference), _ms(tm.candidate), _speedup(tm.speedup))
        if tm.device_candidate:
            table.add_row(
                f"device ({tm.device_method}, median)",
                f"{tm.device_reference.median_ms:.4f}",
                f"{tm.device_candidate.median_ms:.4f}",
                _speedup(tm.device_speedup),
            )
        if tm.compile_reference:
            table.add_row(
                "vs torch.compile (mean)", _ms(tm.compile_reference), "", _speedup(tm.compile_speedup)
            )
        parts.append(table)
    if r.profile and r.profile.kernels:
        share = verdict["library_share"]
        title = "GPU kernels in one forward" + ("" if share is None else f" (library share {share:.0%})")
        table = Table("kernel", "calls", "total µs", "share", "custom", title=title)
        for k in r.profile.kernels[:10]:
            table.add_row(
                k.name[:90], str(k.calls), f"{k.total_us:.1f}", f"{k.share:.0%}", "yes" if k.custom else ""
            )
        parts.append(table)
    hw = r.hardware
    parts.append(Text(
        f"hardware: {hw.gpu_name or hw.device} (cc {hw.compute_capability}), driver {hw.driver}, CUDA {hw.cuda}, "
        f"torch {hw.torch}, triton {hw.triton}; stages (s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in r.stages.items()),
        style="dim",
    ))  # fmt: skip
    return Group(*parts)
