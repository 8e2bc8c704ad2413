"""Turning a problem into the first messages, and an `EvalResult` into the feedback message of a turn."""

from __future__ import annotations

import math
import re

from kb_agent.evaluator.result import CorrectnessInfo, EvalResult, ProfileInfo, Status, TrialResult
from kb_agent.evaluator.settings import TOLERANCES
from kb_agent.problems import Problem
from kb_agent.prompts import example_parts, render

MAX_COMPILE_ERRORS = 10  # compiler errors shown, from the first
MAX_ERROR_CHARS = 400  # per error line
MAX_LOG_CHARS = 3000  # compile log excerpt when there are no parsed errors
MAX_OUTPUT_CHARS = 2000  # tail of the candidate's stderr/stdout shown with a runtime error
MAX_FAILED_TRIALS = 3  # correctness trials described in detail
MAX_KERNELS = 8  # profile rows shown

_DTYPES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}
_BACKEND_NAMES = {"cuda": "CUDA", "triton": "Triton"}


def initial_messages(
    problem: Problem, backend: str, gpu_name: str, arch: str, precision: str = "fp32"
) -> list[dict]:
    """The system prompt and the task prompt for `problem`.

    `backend` is "cuda" or "triton"; `gpu_name` ("NVIDIA H100 80GB HBM3") and `arch` ("9.0") come
    from the evaluator's hardware record; `precision` is "fp32", "fp16" or "bf16" (KernelBench's
    tolerances are quoted). Raises ValueError for an unknown backend or precision.
    """
    if backend not in _BACKEND_NAMES:
        raise ValueError(f"no task prompt for backend {backend!r}; choose cuda or triton")
    if precision not in TOLERANCES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(TOLERANCES)}")
    example_reference, example_answer = example_parts(backend)
    tol = TOLERANCES[precision]
    task = render(
        f"task_{backend}",
        reference=problem.code.strip(),
        gpu_name=gpu_name,
        arch=arch,
        precision=precision,
        dtype=_DTYPES[precision],
        atol=f"{tol:g}",
        rtol=f"{tol:g}",
        example_reference=example_reference.strip(),
        example_answer=example_answer.strip(),
    )
    return [{"role": "system", "content": render("system")}, {"role": "user", "content": task}]


def feedback_for(result: EvalResult | None, *, no_code: bool = False, truncated: bool = False) -> str:
    """The feedback message for one turn.

    `no_code=True` (with `result` None): the reply held no code block defining `ModelNew`;
    `truncated=True` adds that the reply was cut off at the token limit. Otherwise the message
    follows `result.status`. Raises ValueError when there is neither a result nor `no_code`.
    """
    if no_code or result is None:
        if not no_code:
            raise ValueError("feedback_for needs an EvalResult, or no_code=True")
        note = (
            " Your reply was cut off at the token limit before the code was complete: keep the reasoning"
            " short and put the code block first."
            if truncated
            else ""
        )
        return render("feedback_no_code", truncated=note)
    status = Status(result.status)
    if status == Status.COMPILE_ERROR:
        return render("feedback_compile_error", errors=compile_summary(result))
    if status == Status.RUNTIME_ERROR:
        output = _tail(result.stderr or result.stdout, MAX_OUTPUT_CHARS)
        if output and output.strip() in (result.message or ""):
            output = ""
        block = f"\nOutput of your module (the end):\n```\n{output.strip()}\n```\n" if output.strip() else ""
        return render("feedback_runtime_error", message=_message(result), output=block)
    if status == Status.TIMEOUT:
        return render("feedback_timeout", message=_message(result))
    if status == Status.INCORRECT:
        return render("feedback_incorrect", summary=correctness_summary(result))
    if status == Status.REJECTED:
        backend = _BACKEND_NAMES.get(result.backend or "", "custom")
        return render("feedback_rejected", message=_message(result), backend=backend)
    return render(
        "feedback_correct",
        runtime_ms=_ms(result.runtime_ms),
        ref_runtime_ms=_ms(result.ref_runtime_ms),
        speedup=_speedup(result.speedup),
        verdict=_verdict(result.speedup),
        profile=profile_table(result.profile),
    )


# -- pieces ---------------------------------------------------------------------------------------------
def compile_summary(result: EvalResult) -> str:
    """The first compiler errors (from `compile.errors`), else an excerpt of the compile log starting a
    little before its first error line, else the result's message."""
    info = result.compile
    parts: list[str] = []
    if result.message:
        parts.append(result.message.strip())
    if info.errors:
        shown = [_clip(e.strip(), MAX_ERROR_CHARS) for e in info.errors[:MAX_COMPILE_ERRORS]]
        more = len(info.errors) - len(shown)
        lines = "\n".join(shown) + (f"\n... and {more} more errors" if more > 0 else "")
        parts.append(f"First errors:\n```\n{lines}\n```")
    elif info.log.strip():
        parts.append(f"Compiler output:\n```\n{trim_log(info.log, MAX_LOG_CHARS)}\n```")
    return "\n\n".join(parts) or "The build failed without a message."


def trim_log(log: str, max_chars: int = MAX_LOG_CHARS) -> str:
    """The part of a compiler log that matters: from two lines before the first line mentioning an
    error, at most `max_chars` characters; the log's end when no line mentions one."""
    lines = log.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if re.search(r"error", line, re.IGNORECASE)), None)
    if first is None:
        return _tail(log.strip(), max_chars)
    text = "\n".join(lines[max(0, first - 2) :])
    return text if len(text) <= max_chars else text[:max_chars].rstrip() + "\n[... trimmed]"


def correctness_summary(result: EvalResult) -> str:
    """What went wrong in the correctness trials: how many passed, and for the first failing trials the
    shape/dtype problem or the value differences (max/mean abs diff, mismatch count and fraction, first
    mismatched indices, NaN/Inf counts)."""
    c: CorrectnessInfo = result.correctness
    lines: list[str] = []
    if result.message:
        lines.append(result.message.strip())
    if c.trials:
        tol = f" (atol={_num(c.atol)}, rtol={_num(c.rtol)})" if c.atol is not None else ""
        lines.append(f"Passed {c.passed} of {c.trials} correctness trials{tol}.")
    failed = [t for t in c.results if not t.passed]
    for t in failed[:MAX_FAILED_TRIALS]:
        lines.append(f"- trial {t.trial}: {trial_line(t)}")
    if len(failed) > MAX_FAILED_TRIALS:
        lines.append(f"- ... {len(failed) - MAX_FAILED_TRIALS} more failing trials")
    return "\n".join(lines) or "The output differs from the reference."


def trial_line(t: TrialResult) -> str:
    """One failed correctness trial in words: what kind of mismatch, the statistics, the first
    mismatched elements."""
    if t.problem == "type":
        return f"output type {t.actual_dtype}, expected {t.expected_dtype}"
    which = f"output[{t.output_index}]" if t.output_index is not None else "output"
    if t.problem == "shape" or (t.expected_shape is not None and t.expected_shape != t.actual_shape):
        return f"{which} shape {t.actual_shape}, expected {t.expected_shape}"
    if t.problem == "dtype" or (t.expected_dtype and t.actual_dtype and t.expected_dtype != t.actual_dtype):
        return f"{which} dtype {t.actual_dtype}, expected {t.expected_dtype}"
    bits = []
    nonfinite = t.nan_actual or t.nan_expected or t.inf_actual or t.inf_expected
    if t.max_abs_diff is not None:
        bits.append(f"max abs diff {_num(t.max_abs_diff)}" + (" (finite elements)" if nonfinite else ""))
    if t.mean_abs_diff is not None:
        bits.append(f"mean abs diff {_num(t.mean_abs_diff)}")
    if t.max_rel_diff is not None:
        bits.append(f"max rel diff {_num(t.max_rel_diff)}")
    if t.mismatched is not None:
        frac = t.mismatch_fraction
        if frac is None and t.numel:
            frac = t.mismatched / t.numel
        of = f" of {t.numel}" if t.numel else ""
        pct = f" ({frac:.2%})" if frac is not None else ""
        bits.append(f"{t.mismatched}{of} elements outside tolerance{pct}")
    special = []
    for what, actual, expected in (
        ("NaN", t.nan_actual, t.nan_expected),
        ("Inf", t.inf_actual, t.inf_expected),
    ):
        if actual or expected:
            special.append(f"{actual} {what} in your output (reference: {expected})")
    if t.nan_expected:
        special.append("NaN never matches, not even NaN")
    text = (f"{which}: " if t.output_index is not None else "") + (
        ", ".join(bits + special) or "values differ"
    )
    if t.first_mismatches:
        shown = "; ".join(
            f"at {m.get('index')}: expected {_num(m.get('expected'))}, got {_num(m.get('actual'))}"
            for m in t.first_mismatches[:5]
        )
        text += f"; first mismatches {shown}"
    return text


def profile_table(profile: ProfileInfo | None, limit: int = MAX_KERNELS) -> str:
    """The top `limit` GPU kernels of one forward as a fixed-width table (name, calls, total µs, share,
    custom or library), plus a line when no custom kernel ran."""
    if profile is None or not profile.kernels:
        return "(no profile was taken)"
    rows = sorted(profile.kernels, key=lambda k: k.total_us, reverse=True)[:limit]
    names = [_clip(k.name, 70) for k in rows]
    width = max(6, *(len(n) for n in names))
    out = [f"{'kernel':<{width}}  {'calls':>5}  {'total µs':>9}  {'share':>6}  kind"]
    for k, name in zip(rows, names, strict=True):
        kind = "custom" if k.custom else "library"
        out.append(f"{name:<{width}}  {k.calls:>5}  {k.total_us:>9.1f}  {k.share:>6.1%}  {kind}")
    hidden = len(profile.kernels) - len(rows)
    if hidden > 0:
        out.append(f"(... {hidden} more kernels)")
    table = "```\n" + "\n".join(out) + "\n```"
    if profile.custom_kernel_ran is False:
        table += "\nNone of these is your kernel: the time is all library kernels. Launch your own kernels."
    elif profile.custom_share is not None:
        table += f"\nYour kernels take {profile.custom_share:.0%} of the GPU kernel time."
    return table


def _message(result: EvalResult) -> str:
    return (result.message or "").strip() or f"The evaluator reported {result.status} without a message."


def _tail(text: str, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else "[...]\n" + text[-n:]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(x: object) -> str:
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return str(x)
        return f"{x:.4g}"
    return str(x)


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:.4g}"


def _speedup(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}x"


def _verdict(speedup: float | None) -> str:
    if speedup is None:
        return "not timed"
    if speedup >= 1.05:
        return "faster than the reference"
    if speedup > 0.95:
        return "about as fast as the reference"
    return "slower than the reference"


__all__ = [
    "compile_summary",
    "correctness_summary",
    "feedback_for",
    "initial_messages",
    "profile_table",
    "trim_log",
]
