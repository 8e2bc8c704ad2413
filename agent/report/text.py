"""The plain-text half of the reports (piped output), and the rows and lines that `terminal` lays out
as rich tables: every fast_p beside its numerator and denominator, under strict mode and under
KernelBench's rules side by side, with the level and the GPU. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

RULE_LABELS = {"strict": "strict", "kernelbench": "KernelBench rules"}
_KEYS = {"strict": "fast_p", "kernelbench": "fast_p_kernelbench"}


def gpu_label(run: dict[str, Any]) -> str:
    """The GPU a run was evaluated on, as printed: its name, "none (CPU)" for a dry run, else "unknown"."""
    return run["gpu"] or ("none (CPU)" if run.get("device") == "cpu" else "unknown")


def fmt_p(p: float) -> str:
    return f"fast_{float(p)}"


def fmt_frac(f: dict[str, Any]) -> str:
    """A fast_p figure as `0.333 (1/3)`: value, numerator and denominator."""
    value = "n/a" if f["value"] is None else f"{f['value']:.3f}"
    return f"{value} ({f['numerator']}/{f['denominator']})"


def fmt_num(x: float | int | None, money: bool = False) -> str:
    if x is None:
        return "-"
    if money:
        return f"${x:.4f}"
    return f"{x:,.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:,.1f}"


def fmt_speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_share(x: float | None) -> str:
    """A fraction 0..1 as a whole percentage; `-` when unknown."""
    return "-" if x is None else f"{x:.0%}"


def _fmt_time(iso: str | None) -> str:
    return "-" if not iso else iso[:19].replace("T", " ")


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as left-aligned columns separated by two spaces (for piped output)."""
    cells = [[str(h) for h in headers], *[["-" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


# ---------------------------------------------------------------- report: lines and rows


FAST_P_TITLE = (
    "fast_p, best correct turn of each trajectory (denominator: trajectories attempted, the same for both)"
)
BY_TURN_TITLE = "fast_p by turn k (best correct turn up to k)"


def section_header(s: dict[str, Any]) -> list[str]:
    run = s["run"]
    return [
        f"run {run['name']} ({run['id']})  status: {run['status']}",
        f"model: {run['model']}  backend: {run['backend']}  precision: {run['precision']}",
        f"level: {s['level']}  GPU: {gpu_label(run)}",
        f"problems: {s['problems']}  trajectories: {s['trajectories']}  turns: {s['turns']}"
        + (f"  not started: {s['not_started']}" if s["not_started"] else ""),
    ]


def fast_p_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per threshold: fast_p under strict mode and under KernelBench's rules."""
    headers = ["", *RULE_LABELS.values()]
    rows = [
        [fmt_p(f["p"]), fmt_frac(f), fmt_frac(kb)]
        for f, kb in zip(s["fast_p"], s["fast_p_kernelbench"], strict=True)
    ]
    return headers, rows


def strict_lines(s: dict[str, Any]) -> list[str]:
    """What strictness cost and why: how many turns strict mode judged and rejected, per check, and the
    library share of each rule's best turns."""
    st = s["strict"]
    n, judged = st["evaluated_turns"], st["strict_turns"]
    if n and not judged:
        lines = ["strict mode: off (parity mode): both columns follow KernelBench's rules"]
    else:
        on = "on" if judged == n else f"on for {judged} of {n} evaluated turns"
        rejected = (
            f"{st['rejected_turns']} turn(s) rejected, "
            f"{st['rejected_correct_under_kernelbench']} of them correct under KernelBench's rules"
            if st["rejected_turns"]
            else "no turn rejected"
        )
        lines = [f"strict mode: {on}; {rejected}"]
        if st["rejections_by_check"]:
            by_check = ", ".join(f"{k} {v}" for k, v in st["rejections_by_check"].items())
            lines.append(f"  rejections per check (a turn can fail several): {by_check}")
    shares = "; ".join(
        f"{label} {_share_summary(s['library_share'][rules])}" for rules, label in RULE_LABELS.items()
    )
    lines.append(
        f"library share (GPU time of one forward in PyTorch/cuBLAS/cuDNN kernels), best turns: {shares}"
    )
    return lines


def _share_summary(d: dict[str, Any]) -> str:
    if not d["n"]:
        return "not measured (no GPU profile)"
    return f"median {fmt_share(d['median'])} of {d['n']} (range {fmt_share(d['min'])}-{fmt_share(d['max'])})"


def costs_and_counts(s: dict[str, Any]) -> list[str]:
    tin, tout, cost = s["tokens_in"], s["tokens_out"], s["cost_usd"]
    counts = lambda d: ", ".join(f"{k} {v}" for k, v in d.items()) or "none"  # noqa: E731
    return [
        f"tokens in: {fmt_num(tin['total'])} total, {fmt_num(tin['per_problem'])} per problem;"
        f"  tokens out: {fmt_num(tout['total'])} total, {fmt_num(tout['per_problem'])} per problem",
        f"cost: {fmt_num(cost['total'], True)} total, {fmt_num(cost['per_problem'], True)} per problem",
        f"outcomes: {counts(s['outcomes'])}",
        f"turn statuses: {counts(s['statuses'])}",
        _checks_line(s),
    ]


def _checks_line(s: dict[str, Any]) -> str:
    pc = s.get("problem_checks") or {"checked": 0, "flagged": []}
    flagged = "; ".join(f"{f['problem']} {', '.join(f['flags'])}" for f in pc["flagged"]) or "none flagged"
    return (
        f"degenerate problems (`kb-agent problems check`, {pc['checked']} of {s['problems']} checked on this "
        f"GPU and precision): {flagged}"
    )


def by_turn_rows(s: dict[str, Any], rules: str) -> tuple[list[str], list[list[str]]]:
    """fast_p of the best turn up to k under `rules` (`strict` or `kernelbench`), one row per k."""
    key = _KEYS[rules]
    headers = ["k", *(fmt_p(f["p"]) for f in s["by_turn"][0][key])] if s["by_turn"] else ["k"]
    return headers, [[str(r["k"]), *(fmt_frac(f) for f in r[key])] for r in s["by_turn"] or []]


def comparison_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Runs side by side: per threshold, a strict row and a KernelBench-rules row."""
    sections = report["runs"]
    headers = ["", "", *(s["run"]["name"] for s in sections)]
    rows = [["level", "", *(s["level"] for s in sections)]]
    for i, p in enumerate(report["p_values"]):
        for rules, label in RULE_LABELS.items():
            rows.append([fmt_p(p), label, *(fmt_frac(s[_KEYS[rules]][i]) for s in sections)])
    return headers, rows


def comparison_title(report: dict[str, Any]) -> str:
    first = report["runs"][0]["run"]
    return f"comparison (GPU: {gpu_label(first)}, precision: {first['precision']})"


def render_report_text(report: dict[str, Any]) -> str:
    """The report as plain text: every fast_p beside its numerator/denominator under strict mode and under
    KernelBench's rules, strict mode's rejections per check, library shares, the level and the GPU."""
    indent = lambda table: ["  " + line for line in table.splitlines()]  # noqa: E731
    blocks = []
    for s in report["runs"]:
        lines = section_header(s)
        lines.append(FAST_P_TITLE + ":")
        lines += indent(text_table(*fast_p_rows(s)))
        lines += strict_lines(s)
        if s["by_turn"] is not None:
            for rules, label in RULE_LABELS.items():
                lines.append(f"{BY_TURN_TITLE}, {label}:")
                lines += indent(text_table(*by_turn_rows(s, rules)))
        lines += costs_and_counts(s)
        blocks.append("\n".join(lines))
    if len(report["runs"]) > 1:
        blocks.append(
            "\n".join([comparison_title(report) + ":", *indent(text_table(*comparison_rows(report)))])
        )
    return "\n\n".join(blocks) + "\n"


# ---------------------------------------------------------------- runs show, runs list


def show_rows(traj: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per turn: strict status, KernelBench-rules status, speedup, library share, runtime, tokens,
    cost, latency, and the strict checks a rejected turn failed."""
    headers = ["turn", "status", "KernelBench", "speedup", "library", "runtime_ms", "tokens in", "tokens out",
               "cost", "latency_s", "failed checks"]  # fmt: skip
    rows = [
        [
            str(t["idx"]),
            t["status"] or "pending",
            t.get("parity_status") or "-",
            fmt_speedup(t["speedup"]),
            fmt_share(t.get("library_share")),
            "-" if t["runtime_ms"] is None else f"{t['runtime_ms']:.4g}",
            fmt_num(t["tokens_in"]),
            fmt_num(t["tokens_out"]),
            fmt_num(t["cost_usd"], True),
            "-" if t["latency_s"] is None else f"{t['latency_s']:.1f}",
            ", ".join(t.get("failed_checks") or []) if t["status"] == "rejected" else "",
        ]
        for t in traj["turns"]
    ]
    return headers, rows


def _best_turn(t: dict[str, Any]) -> tuple[int | None, float | None]:
    """(turn, speedup) of the trajectory's best correct turn: the stored one of a finished trajectory,
    else worked out from its turns so far (an interrupted or still running trajectory)."""
    if t["best_turn"] is not None:
        return t["best_turn"], t["best_speedup"]
    correct = [x for x in t.get("turns", []) if x["status"] == "correct" and x["speedup"] is not None]
    best = max(correct, key=lambda x: x["speedup"], default=None)
    return (best["idx"], best["speedup"]) if best else (None, None)


def traj_title(t: dict[str, Any]) -> str:
    turn, speedup = _best_turn(t)
    best = f"best {fmt_speedup(speedup)} at turn {turn}" if turn is not None else "no correct turn"
    kb = t.get("best_kernelbench") or {}
    if kb.get("turn") is not None and (kb["turn"], kb["speedup"]) != (turn, speedup):
        best += f" (KernelBench rules: {fmt_speedup(kb['speedup'])} at turn {kb['turn']}, library share {fmt_share(kb['library_share'])})"
    return (
        f"{t['problem_key']} {t['problem_name']}  sample {t['sample']}  "
        f"outcome: {t['outcome'] or 'unfinished'}  {best}"
    )


def run_line(run: dict[str, Any]) -> str:
    return (
        f"run {run['name']} ({run['id']})  model: {run['model']}  precision: {run['precision']}  "
        f"GPU: {gpu_label(run)}  status: {run['status']}"
    )


def render_show_text(shown: dict[str, Any]) -> str:
    """`show_run`'s result as plain text: one block per trajectory, one row per turn."""
    blocks = [run_line(shown["run"])]
    for t in shown["trajectories"]:
        table = text_table(*show_rows(t)) if t["turns"] else "  (no turns)"
        blocks.append(traj_title(t) + "\n" + table)
    return "\n\n".join(blocks) + "\n"


def runs_rows(runs: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    headers = ["id", "name", "created", "model", "problems", "status"]
    rows = [
        [r["id"], r["name"], _fmt_time(r["created"]), r["model"], str(r["problems"]), r["status"]]
        for r in runs
    ]
    return headers, rows


def render_runs_text(runs: list[dict[str, Any]]) -> str:
    """`list_runs`'s result as plain text columns."""
    return text_table(*runs_rows(runs)) + "\n"


__all__ = ["render_report_text", "render_runs_text", "render_show_text", "text_table"]
