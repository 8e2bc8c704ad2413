"""Reports over the trajectory store: best-of-trajectory fast_p per run, with the denominator, the level
and the GPU beside every figure; and the turn-by-turn view of a run.

Each function comes in two halves: one builds a JSON-serialisable dict from the store (what `--json`
prints and tests check), the others render that dict as plain text (piped output) or as rich tables (a
terminal). Nothing here prints.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from kb_agent.agent import metrics
from kb_agent.agent.store import Store
from kb_agent.problems.errors import KBAgentError


class ReportError(KBAgentError):
    """A report that cannot be made as asked (runs that must not be compared, an unknown problem or
    turn); the message is one line that says why and what to do."""


# ---------------------------------------------------------------- building


def level_label(level: int | None) -> str:
    """How a level is written in reports: `1`..`4`, `toy` (level 0), `file` (a loose file, no level)."""
    return "file" if level is None else "toy" if level == 0 else str(level)


def _sum(values: list[Any]) -> float | int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _per(total: float | None, n: int) -> float | None:
    return None if total is None or not n else total / n


def _run_summary(run: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "name", "model", "backend", "precision", "gpu", "status", "created", "finished")
    return {**{k: run.get(k) for k in keys}, "device": (run.get("config") or {}).get("device")}


def _gpu(run: dict[str, Any]) -> str:
    """The GPU a run was evaluated on, as printed: its name, "none (CPU)" for a dry run, else "unknown"."""
    return run["gpu"] or ("none (CPU)" if run.get("device") == "cpu" else "unknown")


def run_section(store: Store, run: dict[str, Any], by_turn: bool = False) -> dict[str, Any]:
    """The report of one run (a row from `Store.get_run`).

    Counting: one trajectory = one (problem, sample). A trajectory is attempted once it has a turn or
    an outcome; attempted trajectories form the fast_p denominator, and one without a correct turn
    counts as a failure. Trajectories created but never started (an interrupted run) are reported as
    `not_started` and left out. Tokens and cost are summed over every turn; `per_problem` divides by
    the number of attempted problems. Cost is in US dollars, None when no call had a known price.
    """
    trajs = store.trajectories(run["id"])
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in store.turn_summaries(run["id"]):
        turns_of[t["trajectory_id"]].append(t)
    attempted = [t for t in trajs if turns_of[t["id"]] or t["outcome"] is not None]
    all_turns = [turn for t in attempted for turn in turns_of[t["id"]]]
    problems = len({t["problem_key"] for t in attempted})
    levels = sorted({t["level"] for t in attempted}, key=lambda lv: (lv is None, lv if lv is not None else 0))
    best = [metrics.best_speedup(turns_of[t["id"]]) for t in attempted]
    max_turn = max((turn["idx"] for turn in all_turns), default=0)

    section: dict[str, Any] = {
        "run": _run_summary(run),
        "levels": levels,
        "level": ", ".join(level_label(lv) for lv in levels) or "none",
        "problems": problems,
        "trajectories": len(attempted),
        "not_started": len(trajs) - len(attempted),
        "turns": len(all_turns),
        "max_turn": max_turn,
        "fast_p": [f.to_dict() for f in metrics.fast_p_table(best)],
        "by_turn": None,
    }
    if by_turn:
        table = metrics.by_turn([turns_of[t["id"]] for t in attempted], max_turn=max_turn)
        section["by_turn"] = [{"k": k, "fast_p": [f.to_dict() for f in row]} for k, row in table.items()]
    for key in ("tokens_in", "tokens_out", "cost_usd"):
        total = _sum([turn[key] for turn in all_turns])
        section[key] = {"total": total, "per_problem": _per(total, problems)}
    sources: dict[str, set[str]] = defaultdict(set)  # problem key -> SHA-256 of the references worked on
    for t in attempted:
        sources[t["problem_key"]].add(store.problem_of(t).code_sha256)
    checks = [c for c in store.problem_checks(run.get("gpu") or "cpu", run["precision"])
              if c["problem_key"] in sources and (c.get("code_sha256") is None  # checked before m006
                                                  or c["code_sha256"] in sources[c["problem_key"]])]  # fmt: skip
    section["problem_checks"] = {
        "checked": len(checks),
        "flagged": [{"problem": c["problem_key"], "flags": c["flags"]} for c in checks if c["flags"]],
    }
    section["outcomes"] = dict(Counter(t["outcome"] or "unfinished" for t in attempted).most_common())
    section["statuses"] = dict(Counter(turn["status"] or "pending" for turn in all_turns).most_common())
    return section


def build_report(
    store: Store, run_refs: Sequence[str] | None = None, by_turn: bool = False
) -> dict[str, Any]:
    """Best-of-trajectory fast_p for one or more runs, each in its own section.

    Args:
        store: the trajectory store.
        run_refs: run ids or names; None or empty = the latest run.
        by_turn: add, per run, fast_p of the best correct turn up to turn k for k = 1..K.

    Returns:
        {"p_values": [...], "runs": [section, ...]}; see `run_section` for a section's fields.

    Raises:
        StoreError: an unknown run, or no runs at all.
        ReportError: the runs differ in GPU or precision, so their figures must not share a table.
    """
    runs = [store.get_run(r) for r in run_refs] if run_refs else [store.latest_run()]
    runs = list({r["id"]: r for r in runs}.values())  # a run named twice is reported once
    for field, label in (("gpu", "GPU"), ("precision", "precision")):
        seen = {r[field] for r in runs}
        if len(seen) > 1:
            which = ", ".join(f"{r['name']}: {r[field] or 'unknown'}" for r in runs)
            raise ReportError(
                f"runs with different {label}s cannot be reported together ({which}); report them one at a time"
            )
    return {"p_values": list(metrics.P_VALUES), "runs": [run_section(store, r, by_turn) for r in runs]}


def _select(
    trajs: list[dict[str, Any]], problem: str | None, sample: int | None, run_name: str
) -> list[dict]:
    """Trajectories matching a problem spec (`2/40`, `2`, `toy/relu`, `toy/1`, a name) and a sample."""
    out = trajs
    if problem is not None:
        spec = problem.strip()

        def match(t: dict[str, Any]) -> bool:
            lv = level_label(t["level"])
            return spec in (t["problem_key"], t["problem_name"], f"{lv}/{t['problem_id']}", lv)

        out = [t for t in out if match(t)]
        if not out:
            keys = list(dict.fromkeys(t["problem_key"] for t in trajs))
            shown = ", ".join(keys[:10]) + (", ..." if len(keys) > 10 else "")
            raise ReportError(f"run {run_name} has no problem {problem!r}; its problems: {shown or 'none'}")
    if sample is not None:
        out = [t for t in out if t["sample"] == sample]
        if not out:
            raise ReportError(f"run {run_name} has no sample {sample} for {problem or 'any problem'}")
    return out


def show_run(store: Store, ref: str, problem: str | None = None, sample: int | None = None) -> dict[str, Any]:
    """A run turn by turn: for each trajectory (optionally one problem and sample), its outcome, best
    turn and the turns' idx, status, speedup, runtime_ms, tokens, cost_usd and latency_s.

    Raises:
        StoreError: no such run.
        ReportError: no trajectory matches `problem` / `sample`.
    """
    run = store.get_run(ref)
    trajs = _select(store.trajectories(run["id"]), problem, sample, run["name"])
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in store.turn_summaries(run["id"]):
        turns_of[t["trajectory_id"]].append(t)
    keep = ("id", "level", "problem_id", "problem_name", "problem_key", "sample", "outcome", "best_turn",
            "best_speedup", "created", "finished")  # fmt: skip
    return {
        "run": _run_summary(run),
        "trajectories": [{**{k: t[k] for k in keep}, "turns": turns_of[t["id"]]} for t in trajs],
    }


def turn_code(store: Store, ref: str, idx: int, problem: str | None = None, sample: int | None = None) -> str:
    """The candidate code extracted from turn `idx` of the one trajectory that `problem`/`sample` select.

    Raises:
        StoreError: no such run.
        ReportError: the selection is not exactly one trajectory, there is no turn `idx`, or it has no code.
    """
    run = store.get_run(ref)
    trajs = _select(store.trajectories(run["id"]), problem, sample, run["name"])
    if len(trajs) != 1:
        names = ", ".join(f"{t['problem_key']}#{t['sample']}" for t in trajs[:10])
        raise ReportError(
            f"--code needs one trajectory but {len(trajs)} match ({names}); pick one with --problem and --sample"
        )
    traj = trajs[0]
    turn = store.turn(traj["id"], idx)
    if turn is None:
        idxs = [t["idx"] for t in store.turn_summaries(run["id"]) if t["trajectory_id"] == traj["id"]]
        have = f"its turns are {min(idxs)}-{max(idxs)}" if idxs else "it has no turns"
        raise ReportError(f"{traj['problem_key']} in run {run['name']} has no turn {idx}; {have}")
    if turn["code"] is None:
        raise ReportError(
            f"turn {idx} of {traj['problem_key']} in run {run['name']} has no extracted code "
            f"(status {turn['status'] or 'pending'})"
        )
    return turn["code"]


def list_runs(store: Store) -> list[dict[str, Any]]:
    """The runs, oldest first: id, name, created, model, problems, trajectories, status, gpu, precision."""
    keys = ("id", "name", "created", "model", "problems", "trajectories", "status", "gpu", "precision")
    return [{k: r[k] for k in keys} for r in store.list_runs()]


# ---------------------------------------------------------------- plain text


def _fmt_p(p: float) -> str:
    return f"fast_{float(p)}"


def _fmt_frac(f: dict[str, Any]) -> str:
    value = "n/a" if f["value"] is None else f"{f['value']:.3f}"
    return f"{value} ({f['numerator']}/{f['denominator']})"


def _fmt_num(x: float | int | None, money: bool = False) -> str:
    if x is None:
        return "-"
    if money:
        return f"${x:.4f}"
    return f"{x:,.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:,.1f}"


def _fmt_speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _fmt_time(iso: str | None) -> str:
    return "-" if not iso else iso[:19].replace("T", " ")


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as left-aligned columns separated by two spaces (for piped output)."""
    cells = [[str(h) for h in headers], *[["-" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _section_header(s: dict[str, Any]) -> list[str]:
    run = s["run"]
    return [
        f"run {run['name']} ({run['id']})  status: {run['status']}",
        f"model: {run['model']}  backend: {run['backend']}  precision: {run['precision']}",
        f"level: {s['level']}  GPU: {_gpu(run)}",
        f"problems: {s['problems']}  trajectories: {s['trajectories']}  turns: {s['turns']}"
        + (f"  not started: {s['not_started']}" if s["not_started"] else ""),
    ]


def _costs_and_counts(s: dict[str, Any]) -> list[str]:
    tin, tout, cost = s["tokens_in"], s["tokens_out"], s["cost_usd"]
    counts = lambda d: ", ".join(f"{k} {v}" for k, v in d.items()) or "none"  # noqa: E731
    return [
        f"tokens in: {_fmt_num(tin['total'])} total, {_fmt_num(tin['per_problem'])} per problem;"
        f"  tokens out: {_fmt_num(tout['total'])} total, {_fmt_num(tout['per_problem'])} per problem",
        f"cost: {_fmt_num(cost['total'], True)} total, {_fmt_num(cost['per_problem'], True)} per problem",
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


def _by_turn_rows(s: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["k", *(_fmt_p(f["p"]) for f in s["by_turn"][0]["fast_p"])] if s["by_turn"] else ["k"]
    return headers, [[str(r["k"]), *(_fmt_frac(f) for f in r["fast_p"])] for r in s["by_turn"] or []]


def _comparison_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    sections = report["runs"]
    headers = ["", *(s["run"]["name"] for s in sections)]
    rows = [
        [_fmt_p(p), *(_fmt_frac(s["fast_p"][i]) for s in sections)] for i, p in enumerate(report["p_values"])
    ]
    rows.insert(0, ["level", *(s["level"] for s in sections)])
    return headers, rows


def render_report_text(report: dict[str, Any]) -> str:
    """The report as plain text: every fast_p beside its numerator/denominator, the level and the GPU."""
    blocks = []
    for s in report["runs"]:
        lines = _section_header(s)
        lines.append("fast_p, best correct turn of each trajectory (denominator: trajectories attempted):")
        lines += [f"  {_fmt_p(f['p'])} = {_fmt_frac(f)}" for f in s["fast_p"]]
        if s["by_turn"] is not None:
            lines.append("fast_p by turn k (best correct turn up to k):")
            lines += ["  " + line for line in text_table(*_by_turn_rows(s)).splitlines()]
        lines += _costs_and_counts(s)
        blocks.append("\n".join(lines))
    if len(report["runs"]) > 1:
        first = report["runs"][0]["run"]
        lines = [f"comparison (GPU: {_gpu(first)}, precision: {first['precision']}):"]
        lines += ["  " + line for line in text_table(*_comparison_rows(report)).splitlines()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _show_rows(traj: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["turn", "status", "speedup", "runtime_ms", "tokens in", "tokens out", "cost", "latency_s"]
    rows = [
        [
            str(t["idx"]),
            t["status"] or "pending",
            _fmt_speedup(t["speedup"]),
            "-" if t["runtime_ms"] is None else f"{t['runtime_ms']:.4g}",
            _fmt_num(t["tokens_in"]),
            _fmt_num(t["tokens_out"]),
            _fmt_num(t["cost_usd"], True),
            "-" if t["latency_s"] is None else f"{t['latency_s']:.1f}",
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


def _traj_title(t: dict[str, Any]) -> str:
    turn, speedup = _best_turn(t)
    best = f"best {_fmt_speedup(speedup)} at turn {turn}" if turn is not None else "no correct turn"
    return (
        f"{t['problem_key']} {t['problem_name']}  sample {t['sample']}  "
        f"outcome: {t['outcome'] or 'unfinished'}  {best}"
    )


def _run_line(run: dict[str, Any]) -> str:
    return (
        f"run {run['name']} ({run['id']})  model: {run['model']}  precision: {run['precision']}  "
        f"GPU: {_gpu(run)}  status: {run['status']}"
    )


def render_show_text(shown: dict[str, Any]) -> str:
    """`show_run`'s result as plain text: one block per trajectory, one row per turn."""
    blocks = [_run_line(shown["run"])]
    for t in shown["trajectories"]:
        table = text_table(*_show_rows(t)) if t["turns"] else "  (no turns)"
        blocks.append(_traj_title(t) + "\n" + table)
    return "\n\n".join(blocks) + "\n"


def _runs_rows(runs: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    headers = ["id", "name", "created", "model", "problems", "status"]
    rows = [
        [r["id"], r["name"], _fmt_time(r["created"]), r["model"], str(r["problems"]), r["status"]]
        for r in runs
    ]
    return headers, rows


def render_runs_text(runs: list[dict[str, Any]]) -> str:
    """`list_runs`'s result as plain text columns."""
    return text_table(*_runs_rows(runs)) + "\n"


# ---------------------------------------------------------------- rich (a terminal)


def _rich_table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None):
    from rich.table import Table

    table = Table(*headers, title=title, title_justify="left")
    for r in rows:
        table.add_row(*r)
    return table


def report_renderables(report: dict[str, Any]) -> list[Any]:
    """The report as rich renderables (for a terminal): the same figures as `render_report_text`."""
    from rich.text import Text

    out: list[Any] = []
    for s in report["runs"]:
        out.append(Text("\n".join(_section_header(s)), style="bold"))
        rows = [[_fmt_p(f["p"]), "n/a" if f["value"] is None else f"{f['value']:.3f}",
                 f"{f['numerator']}/{f['denominator']}"] for f in s["fast_p"]]  # fmt: skip
        out.append(_rich_table(["", "fast_p", "n/N"], rows, "best correct turn of each trajectory"))
        if s["by_turn"] is not None:
            out.append(_rich_table(*_by_turn_rows(s), "fast_p by turn k (best correct turn up to k)"))
        out.append(Text("\n".join(_costs_and_counts(s))))
    if len(report["runs"]) > 1:
        first = report["runs"][0]["run"]
        title = f"comparison (GPU: {_gpu(first)}, precision: {first['precision']})"
        out.append(_rich_table(*_comparison_rows(report), title))
    return out


def show_renderables(shown: dict[str, Any]) -> list[Any]:
    """`show_run`'s result as rich renderables."""
    from rich.text import Text

    out: list[Any] = [Text(_run_line(shown["run"]), style="bold")]
    for t in shown["trajectories"]:
        out.append(_rich_table(*_show_rows(t), _traj_title(t)))
    return out


def runs_renderable(runs: list[dict[str, Any]]) -> Any:
    """`list_runs`'s result as a rich table."""
    return _rich_table(*_runs_rows(runs))


__all__ = [
    "ReportError",
    "build_report",
    "level_label",
    "list_runs",
    "render_report_text",
    "render_runs_text",
    "render_show_text",
    "report_renderables",
    "run_section",
    "runs_renderable",
    "show_renderables",
    "show_run",
    "text_table",
    "turn_code",
]
