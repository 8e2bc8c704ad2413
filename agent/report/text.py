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


def fmt_ci(f: dict[str, Any]) -> str:
    """A figure's 95 % bootstrap interval as `[0.33, 1.00]`; `-` when none was drawn."""
    ci = f.get("ci95")
    return "-" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def fmt_num(x: float | int | None, money: bool = False) -> str:
    if x is None:
        return "-"
    if money:
        return f"${x:.4f}"
    return f"{x:,.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:,.1f}"


def fmt_speedup(x: float | None) -> str:
    """A speedup as `1.60x`; one below 0.1x with two significant digits (`0.0031x`, `0.050x`), so a slow
    candidate (a CPU run's 0.001x-0.05x) never reads as `0.00x`. The one way the report writes a speedup."""
    if x is None:
        return "-"
    return f"{x:.2f}x" if x >= 0.1 or x <= 0 else f"{x:#.2g}x"


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
    "fast_p, best correct turn of each trajectory (denominator: problems attempted, the same for both rules)"
)
BY_TURN_TITLE = "fast_p by turn k (best correct turn up to k)"
CI_NOTE = "95% CI: bootstrap over problems"
PER_TRAJECTORY_TITLE = (
    "fast_p per trajectory: every sample counted on its own (denominator: trajectories = problems x samples)"
)
AT_K_TITLE = "fast_p@k over samples (Chen et al. 2021's unbiased estimator, mean over problems) [95% CI]"
STATUS_TITLE = "status mix by turn (turns at index k; ended: trajectories that stopped before k)"


def fast_p_title(s: dict[str, Any]) -> str:
    """The headline table's title: what is counted, and the denominator."""
    n, lo = s["samples"]["max"], s["samples"]["min"]
    if n <= 1:
        return f"{FAST_P_TITLE}; {CI_NOTE}"
    each = f"{n} samples" if lo == n else f"{lo}-{n} samples"
    return (f"fast_p per problem: the best of its {each} (denominator: problems, the same for both rules); "
            f"{CI_NOTE}")  # fmt: skip


def section_header(s: dict[str, Any]) -> list[str]:
    run = s["run"]
    n = s["samples"]["max"]
    return [
        f"run {run['name']} ({run['id']})  status: {run['status']}",
        f"model: {run['model']}  backend: {run['backend']}  precision: {run['precision']}",
        f"level: {s['level']}  GPU: {gpu_label(run)}",
        f"problems: {s['problems']}  trajectories: {s['trajectories']}  turns: {s['turns']}"
        + (f"  samples per problem: {n}" if n > 1 else "")
        + (f"  not started: {s['not_started']}" if s["not_started"] else "")
        + (f"  never answered by the model (not counted): {s['unanswered']}" if s.get("unanswered") else ""),
    ]


def fast_p_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per threshold: fast_p under strict mode and under KernelBench's rules, then each one's
    95 % bootstrap interval. `s` is a section, or any dict with `fast_p` and `fast_p_kernelbench`."""
    headers = ["", *RULE_LABELS.values(), *(f"{label} 95% CI" for label in RULE_LABELS.values())]
    rows = [
        [fmt_p(f["p"]), fmt_frac(f), fmt_frac(kb), fmt_ci(f), fmt_ci(kb)]
        for f, kb in zip(s["fast_p"], s["fast_p_kernelbench"], strict=True)
    ]
    return headers, rows


def at_k_rows(s: dict[str, Any], rules: str) -> tuple[list[str], list[list[str]]]:
    """fast_p@k under `rules`: one row per threshold, one column per k, each value with its interval."""
    ks = s["fast_p_at_k"][rules]
    headers = ["", *(f"@{r['k']}" for r in ks)]
    rows = []
    for q, f in enumerate(ks[0]["fast_p"] if ks else []):
        cells = []
        for r in ks:
            g = r["fast_p"][q]
            cells.append("n/a" if g["value"] is None else f"{g['value']:.3f} {fmt_ci(g)}")
        rows.append([fmt_p(f["p"]), *cells])
    return headers, rows


def geomean_line(s: dict[str, Any]) -> str:
    """The geometric-mean speedup of the correct trajectories' best turns (and problems' best samples)."""
    parts = []
    for rules, label in RULE_LABELS.items():
        g = s["geomean_speedup"][rules]
        t = g["trajectory"]
        text = f"{label} {fmt_speedup(t['value'])} over {t['n']} of {t['of']} trajectories"
        if s["samples"]["max"] > 1:
            pb = g["problem"]
            text += f" ({fmt_speedup(pb['value'])} over the best sample of {pb['n']} of {pb['of']} problems)"
        parts.append(text)
    return "geometric-mean speedup, correct trajectories only: " + "; ".join(parts)


def status_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The status mix at each turn: one row per k, one column per status seen, and `ended`."""
    seen: list[str] = []
    for r in s["status_by_turn"]:
        seen += [k for k in r["counts"] if k not in seen]
    headers = ["k", *seen, "ended"]
    rows = [
        [str(r["k"]), *(str(r["counts"].get(k, 0)) for k in seen), str(r["ended"])]
        for r in s["status_by_turn"]
    ]
    return headers, rows


def budget_steps(s: dict[str, Any], budget: str) -> list[int]:
    """The steps of a budget curve the text table prints: the first, every one at which a fast_p (strict,
    per problem) changes, and the last; the steps left out repeat the row above them."""
    curve = s["by_budget"][budget]
    values = [[(f["numerator"], f["denominator"]) for f in c["fast_p"]] for c in curve]
    return [i for i in range(len(curve)) if i in (0, len(curve) - 1) or values[i] != values[i - 1]]


def budget_rows(s: dict[str, Any], budget: str) -> tuple[list[str], list[list[str]]]:
    """fast_p (strict, per-problem view) against a cumulative budget at the steps `budget_steps` picks,
    so no change is hidden (the JSON and the plots have every step)."""
    curve = s["by_budget"][budget]
    if not curve:
        return ["budget"], []
    money = budget == "cost_usd"
    headers = ["budget", *(fmt_p(f["p"]) for f in curve[0]["fast_p"])]
    steps = budget_steps(s, budget)
    labels = budget_labels([curve[i]["budget"] for i in steps], money)
    rows = [
        [label, *(fmt_frac(f) for f in curve[i]["fast_p"])] for label, i in zip(labels, steps, strict=True)
    ]
    return headers, rows


def budget_labels(values: list[float], money: bool = False) -> list[str]:
    """The budgets of a table's rows as `fmt_num` writes them, with more decimals (up to three more) where
    two different budgets would read the same (GPU-seconds 2.61 and 2.64 both as `2.6`)."""
    for extra in range(4):
        labels = [_fmt_budget(x, money, extra) for x in values]
        if all(labels[i] != labels[i + 1] for i in range(len(values) - 1) if values[i] != values[i + 1]):
            break
    return labels


def _fmt_budget(x: float, money: bool, extra: int) -> str:
    if money:
        return f"${x:.{4 + extra}f}"
    if float(x).is_integer() or abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{1 + extra}f}"


def budget_title(s: dict[str, Any], budget: str) -> str:
    """The title of a budget table: the budget on the run's device, and how many steps were merged."""
    merged = len(s["by_budget"][budget]) - len(budget_steps(s, budget))
    note = f"; {merged} budget steps without a change merged into the row above" if merged else ""
    return (f"fast_p against {budget_label(s, budget)} ({verdicts_of(s)}; each trajectory cut at the budget; a row at "
            f"each budget where a fast_p changes, and the largest{note})")  # fmt: skip


def budget_label(s: dict[str, Any], budget: str) -> str:
    """A budget as the tables name it (`metrics.BUDGETS`), its seconds on the run's device: `GPU-seconds`,
    or `CPU-seconds` for a run made with `--device cpu`."""
    from kb_agent.agent.metrics import BUDGETS

    if budget == "gpu_s":
        return f"{_run_device(s)}-seconds per trajectory (correctness and timing stages)"
    return BUDGETS[budget]


def cost_recorded(s: dict[str, Any]) -> bool:
    """Whether any turn of the run had a price: a scripted or local model records none (or $0), and then
    the report shows no dollar table, only "no cost recorded", once."""
    return bool(s["cost_usd"]["total"])


def per_level_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """fast_p per level (per-problem view) under both rules, and the geometric-mean speedup."""
    levels = s["per_level"]
    ps = [f["p"] for f in levels[0]["fast_p"]] if levels else []
    headers = ["level", "problems", "rules", *(fmt_p(p) for p in ps), "geomean"]
    rows = []
    for r in levels:
        for rules, label in RULE_LABELS.items():
            suffix = "" if rules == "strict" else "_kernelbench"
            rows.append([r["level"], str(r["problems"]), label, *(fmt_frac(f) for f in r[_KEYS[rules]]),
                         fmt_speedup(r[f"geomean_speedup{suffix}"]["value"])])  # fmt: skip
    return headers, rows


def problems_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per problem: samples, correct samples and best speedup under each rule, first correct turn."""
    headers = ["problem", "name", "samples", "correct", "best", "correct (KB rules)", "best (KB rules)",
               "first correct turn"]  # fmt: skip
    rows = [
        [r["problem"], r["name"], str(r["samples"]), str(r["correct_samples"]), fmt_speedup(r["best_speedup"]),
         str(r["correct_samples_kernelbench"]), fmt_speedup(r["best_speedup_kernelbench"]),
         "-" if r["first_correct_turn"] is None else str(r["first_correct_turn"])]
        for r in s["problems_table"]
    ]  # fmt: skip
    return headers, rows


def baseline_title(s: dict[str, Any]) -> str | None:
    """The baseline table's title, or None when there is no table to show (see `baseline_lines`)."""
    b = s["baselines"]
    if not b.get("available") or not b["covered"]:
        return None
    return (f"fast_p against the baselines ({verdicts_of(s)}, per problem; {b['covered']} of {b['problems']} problems have a "
            f"baseline on {b['gpu']}, {b['precision']}, torch {b['torch']}, torch.compile mode {b['compile_mode']}); "
            f"{CI_NOTE}")  # fmt: skip


def baseline_rows(s: dict[str, Any], rules: str = "strict") -> tuple[list[str], list[list[str]]]:
    """One row per threshold: fast_p against eager, torch.compile and the faster of the two, with intervals."""
    from kb_agent.agent.report.baselines import AGAINST

    b = s["baselines"][_KEYS[rules]]
    headers = ["", *AGAINST.values(), *(f"{label} 95% CI" for label in AGAINST.values())]
    rows = []
    for q, f in enumerate(b["eager"]):
        cells = [b[a][q] for a in AGAINST]
        rows.append([fmt_p(f["p"]), *(fmt_frac(c) for c in cells), *(fmt_ci(c) for c in cells)])
    return headers, rows


def baseline_lines(s: dict[str, Any]) -> list[str]:
    """What the baselines say besides the table: torch.compile against eager, the geometric means, and why
    there is no table when there is none."""
    b = s["baselines"]
    if not b.get("available"):
        return [f"baselines: none to compare with ({b['reason']})"]
    where = f"{b['gpu']}, {b['precision']}, torch {b['torch']}, torch.compile mode {b['compile_mode']}"
    if not b["covered"]:
        return [
            f"baselines: none stored for these problems on {where} (`kb-agent baseline SPEC` measures them)"
        ]
    ce = b["compile_over_eager"]
    lines = [f"torch.compile against eager (geometric mean of eager ms / compiled ms): {fmt_speedup(ce['value'])} "
             f"over {ce['n']} problems" + (f"; torch.compile failed on {b['compile_failed']}" if b["compile_failed"] else "")]  # fmt: skip
    g = b["geomean_speedup"]["strict"]
    lines.append("geometric-mean best speedup (strict, problems with a correct sample): "
                 + ", ".join(f"against {label} {fmt_speedup(g[a]['value'])} ({g[a]['n']})"
                             for a, label in _against().items()))  # fmt: skip
    if b["missing"]:
        lines.append(
            f"  no baseline for: {', '.join(b['missing'])}"
            + (", ..." if b["problems"] - b["covered"] > 20 else "")
        )
    return lines


def _against() -> dict[str, str]:
    from kb_agent.agent.report.baselines import AGAINST

    return AGAINST


def verdicts_of(s: dict[str, Any]) -> str:
    """Whose verdicts a run's strict-column figures are: `strict` where strict mode judged any of its turns,
    else `KernelBench rules; strict mode off` (a `--no-strict` run's strict column is its parity verdict)."""
    st = s["strict"]
    return (
        "KernelBench rules; strict mode off" if st["evaluated_turns"] and not st["strict_turns"] else "strict"
    )


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
    tin, tout, cost, gpu = s["tokens_in"], s["tokens_out"], s["cost_usd"], s.get("gpu_s") or {}
    counts = lambda d: ", ".join(f"{k} {v}" for k, v in d.items()) or "none"  # noqa: E731
    dollars = (f"{fmt_num(cost['total'], True)} total, {fmt_num(cost['per_problem'], True)} per problem"
               if cost_recorded(s) else NO_COST)  # fmt: skip
    return [
        f"tokens in: {fmt_num(tin['total'])} total, {fmt_num(tin['per_problem'])} per problem;"
        f"  tokens out: {fmt_num(tout['total'])} total, {fmt_num(tout['per_problem'])} per problem",
        f"cost: {dollars};  {_run_device(s)}-seconds (correctness and timing stages): {fmt_num(gpu.get('total'))} total, "
        f"{fmt_num(gpu.get('per_problem'))} per problem",
        eval_seconds_line(s),
        usage_line(s),
        f"outcomes: {counts(s['outcomes'])}",
        f"turn statuses: {counts(s['statuses'])}",
        _checks_line(s),
    ]


NO_COST = "no cost recorded (a scripted or local model, or one without a known price)"


def _run_device(s: dict[str, Any]) -> str:
    """Where a run's correctness and timing stages ran (`build.seconds_device`): "GPU" or "CPU"."""
    from kb_agent.agent.report.build import seconds_device

    return seconds_device(s.get("run") or {})


def eval_seconds_line(s: dict[str, Any]) -> str:
    """Where each evaluation's wall time went: the median and total seconds of its build, its run on the
    run's device (correctness and timing stages: "GPU", or "CPU" for a run made with `--device cpu`), the
    child's start and the whole evaluation (`build.eval_seconds_section`)."""
    e = s.get("eval_seconds") or {}
    if not e.get("evaluations"):
        return "evaluation seconds per turn: no evaluations"
    n = lambda k: f"{k} evaluation{'s' if k != 1 else ''}"  # noqa: E731
    if not e["total"]["n"]:
        return f"evaluation seconds per turn: not recorded ({n(e['evaluations'])} without stage times)"
    part = lambda label, d: f"{label} median {fmt_num(d['median'])} s (total {fmt_num(d['total'])} s)"  # noqa: E731
    return (f"evaluation seconds per turn, {n(e['total']['n'])}: {part('build', e['build'])}, "
            f"{part(f'{_run_device(s)} (correctness + timing)', e['run'])}, child start median {fmt_num(e['setup']['median'])} s, "
            f"{part('whole evaluation', e['total'])}")  # fmt: skip


def usage_line(s: dict[str, Any]) -> str:
    """Model calls and evaluations, in total and per trajectory (each trajectory's tree of turns)."""
    u = s.get("usage")
    if not u:
        return "model calls: none"
    rows = u["per_trajectory"]
    spread = lambda k: f"{min(r[k] for r in rows)}-{max(r[k] for r in rows)}" if rows else "0"  # noqa: E731
    n = u["total"]["copied"]
    copied = f", {n} turn{'s' if n != 1 else ''} copied by a fork" if n else ""
    r = u["total"].get("reused") or 0
    copied = (f", {r} turn{'s' if r != 1 else ''} reused an earlier result" if r else "") + copied
    return (f"model calls: {u['total']['model_calls']} (each trajectory {spread('model_calls')}); "
            f"evaluations: {u['total']['evaluations']} (each trajectory {spread('evaluations')}){copied}")  # fmt: skip


def usage_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["problem", "sample", "turns", "model calls", "evaluations", "copied", "depth"]
    rows = [[r["problem"], str(r["sample"]), str(r["turns"]), str(r["model_calls"]), str(r["evaluations"]),
             str(r["copied"]), str(r["depth"])] for r in (s.get("usage") or {}).get("per_trajectory", [])]  # fmt: skip
    return headers, rows


def _checks_line(s: dict[str, Any]) -> str:
    from kb_agent.agent.report.degenerate import checks_line

    return checks_line(s)


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


def section_blocks(s: dict[str, Any], per_problem: bool = False) -> list[tuple[str, Any]]:
    """A section as an ordered list of ("lines", [str]) and ("table", (title, headers, rows)) blocks,
    which `render_report_text` prints as text and `terminal` as rich tables."""
    from kb_agent.agent.metrics import BUDGETS

    out: list[tuple[str, Any]] = [("lines", section_header(s))]
    out.append(("table", (fast_p_title(s), *fast_p_rows(s))))
    if s.get("excluding_degenerate"):
        from kb_agent.agent.report.degenerate import excluded_title

        out.append(("table", (excluded_title(s), *fast_p_rows(s["excluding_degenerate"]))))
    if s.get("per_trajectory"):
        out.append(("table", (PER_TRAJECTORY_TITLE, *fast_p_rows(s["per_trajectory"]))))
    if s.get("fast_p_at_k"):
        for rules, label in RULE_LABELS.items():
            out.append(("table", (f"{AT_K_TITLE}, {label}", *at_k_rows(s, rules))))
    out.append(("lines", [geomean_line(s), *strict_lines(s)]))
    if len(s["per_level"]) > 1:
        out.append(("table", ("fast_p per level (per problem)", *per_level_rows(s))))
    title = baseline_title(s)
    if title:
        out.append(("table", (title, *baseline_rows(s))))
    out.append(("lines", baseline_lines(s)))
    if s["by_turn"] is not None:
        for rules, label in RULE_LABELS.items():
            out.append(("table", (f"{BY_TURN_TITLE}, {label}", *by_turn_rows(s, rules))))
        out.append(("table", (STATUS_TITLE, *status_rows(s))))
    if s.get("by_budget"):
        for budget in BUDGETS:
            if budget != "cost_usd" or cost_recorded(s):  # else the cost line says so, once
                out.append(("table", (budget_title(s, budget), *budget_rows(s, budget))))
    if per_problem:
        out.append(("table", ("per problem", *problems_rows(s))))
        out.append(
            ("table", ("model calls and evaluations, each trajectory (its tree of turns)", *usage_rows(s)))
        )
    out.append(("lines", costs_and_counts(s)))
    return out


def render_report_text(report: dict[str, Any], per_problem: bool = False) -> str:
    """The report as plain text: every fast_p beside its numerator/denominator and 95 % interval under
    strict mode and under KernelBench's rules, per problem (and per trajectory and @k with several
    samples), the geometric-mean speedup, strict mode's rejections per check, library shares, the
    baselines, the level and the GPU; the by-turn, status and budget tables when the report has them,
    and one row per problem with `per_problem`."""
    indent = lambda table: ["  " + line for line in table.splitlines()]  # noqa: E731
    blocks = []
    for s in report["runs"]:
        lines: list[str] = []
        for kind, body in section_blocks(s, per_problem):
            if kind == "lines":
                lines += body
            else:
                title, headers, rows = body
                lines.append(title + ":")
                lines += indent(text_table(headers, rows))
        blocks.append("\n".join(lines))
    if len(report["runs"]) > 1:
        blocks.append(
            "\n".join([comparison_title(report) + ":", *indent(text_table(*comparison_rows(report)))])
        )
    return "\n\n".join(blocks) + "\n"


# ---------------------------------------------------------------- runs show, runs list


def show_rows(traj: dict[str, Any], cost: bool = True) -> tuple[list[str], list[list[str]]]:
    """One row per turn: strict status, KernelBench-rules status, speedup, library share, runtime, tokens,
    cost (unless `cost` is False: no turn of the run had a price), latency, and the strict checks a
    rejected turn failed; when the turns are not one chain (a search strategy's tree), the turn each
    continues ("task": a root) beside its number."""
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
    if not cost:
        at = headers.index("cost")
        headers.pop(at)
        for row in rows:
            row.pop(at)
    if any(t.get("parent_idx") != (t["idx"] - 1 or None) for t in traj["turns"]):  # a tree: say whose child
        headers.insert(1, "parent")
        for row, t in zip(rows, traj["turns"], strict=True):
            row.insert(1, str(t["parent_idx"] or "task"))
    return headers, rows


def shown_cost(shown: dict[str, Any]) -> bool:
    """Whether any turn `show_run` returned had a price (else no cost column, and `run_line` says so)."""
    return any(t.get("cost_usd") for traj in shown["trajectories"] for t in traj["turns"])


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
    own = next((x["speedup"] for x in t.get("turns", []) if x["idx"] == turn), None)
    if turn is not None and own is not None and fmt_speedup(own) != fmt_speedup(speedup):
        best += f" (re-timed in a fresh process; the turn's own timing read {fmt_speedup(own)})"
    kb = t.get("best_kernelbench") or {}
    if kb.get("turn") is not None and (kb["turn"], kb["speedup"]) != (turn, speedup):
        best += f" (KernelBench rules: {fmt_speedup(kb['speedup'])} at turn {kb['turn']}, library share {fmt_share(kb['library_share'])})"
    return (
        f"{t['problem_key']} {t['problem_name']}  sample {t['sample']}  "
        f"outcome: {t['outcome'] or 'unfinished'}  {best}"
    )


def run_line(run: dict[str, Any], cost: bool = True) -> str:
    """The head line of `runs show`; `cost` False (no turn had a price) adds "no cost recorded"."""
    return (
        f"run {run['name']} ({run['id']})  model: {run['model']}  precision: {run['precision']}  "
        f"GPU: {gpu_label(run)}  status: {run['status']}" + ("" if cost else f"  cost: {NO_COST}")
    )


def render_show_text(shown: dict[str, Any]) -> str:
    """`show_run`'s result as plain text: one block per trajectory, one row per turn."""
    cost = shown_cost(shown)
    blocks = [run_line(shown["run"], cost)]
    for t in shown["trajectories"]:
        table = text_table(*show_rows(t, cost)) if t["turns"] else "  (no turns)"
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


__all__ = ["render_report_text", "render_runs_text", "render_show_text", "section_blocks", "text_table"]
