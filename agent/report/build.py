"""The building half of the reports: JSON-serialisable dicts made from the store (what `--json` prints,
what tests check, what `text` and `terminal` render). Nothing here prints.
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


def run_section(store: Store, run: dict[str, Any], by_turn: bool = False) -> dict[str, Any]:
    """The report of one run (a row from `Store.get_run`).

    Counting: one trajectory = one (problem, sample). A trajectory is attempted once it has a turn or
    an outcome; attempted trajectories form the fast_p denominator, and one without a correct turn
    counts as a failure. Trajectories created but never started (an interrupted run) are reported as
    `not_started` and left out. Tokens and cost are summed over every turn; `per_problem` divides by
    the number of attempted problems. Cost is in US dollars, None when no call had a known price.

    fast_p comes twice over the same trajectories: `fast_p` under strict mode (the evaluator's
    verdict) and `fast_p_kernelbench` under KernelBench's rules alone (a turn strict mode rejected
    counts by its `parity_status`); `strict` says how many turns strict mode judged and rejected, per
    check; `library_share` summarises the share of GPU time in library kernels of each rule's best
    turns (`metrics.share_summary`, fractions 0..1).
    """
    trajs = store.trajectories(run["id"])
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in store.turn_summaries(run["id"]):
        turns_of[t["trajectory_id"]].append(t)
    attempted = [t for t in trajs if turns_of[t["id"]] or t["outcome"] is not None]
    all_turns = [turn for t in attempted for turn in turns_of[t["id"]]]
    problems = len({t["problem_key"] for t in attempted})
    levels = sorted({t["level"] for t in attempted}, key=lambda lv: (lv is None, lv if lv is not None else 0))
    max_turn = max((turn["idx"] for turn in all_turns), default=0)
    trajs_turns = [turns_of[t["id"]] for t in attempted]

    section: dict[str, Any] = {
        "run": _run_summary(run),
        "levels": levels,
        "level": ", ".join(level_label(lv) for lv in levels) or "none",
        "problems": problems,
        "trajectories": len(attempted),
        "not_started": len(trajs) - len(attempted),
        "turns": len(all_turns),
        "max_turn": max_turn,
        **_both_rules(trajs_turns, all_turns),
        "by_turn": None,
    }
    if by_turn:
        strict = metrics.by_turn(trajs_turns, max_turn=max_turn)
        kb = metrics.by_turn(trajs_turns, max_turn=max_turn, rules="kernelbench")
        section["by_turn"] = [
            {
                "k": k,
                "fast_p": [f.to_dict() for f in strict[k]],
                "fast_p_kernelbench": [f.to_dict() for f in kb[k]],
            }
            for k in strict
        ]
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


def _both_rules(trajectories: list[list[dict[str, Any]]], all_turns: list[dict[str, Any]]) -> dict[str, Any]:
    """fast_p under both rules over the same trajectories, strict mode's rejections, library shares."""
    best = {
        rules: [metrics.best_turn(turns, rules=rules) for turns in trajectories] for rules in metrics.RULES
    }
    speedups = {
        rules: [None if t is None else metrics.counted_speedup(t, rules) for t in turns]
        for rules, turns in best.items()
    }
    evaluated = [t for t in all_turns if t["status"] not in (None, "no_code", "model_error")]
    rejected = [t for t in all_turns if t["status"] == "rejected"]
    return {
        "fast_p": [f.to_dict() for f in metrics.fast_p_table(speedups["strict"])],
        "fast_p_kernelbench": [f.to_dict() for f in metrics.fast_p_table(speedups["kernelbench"])],
        "strict": {
            "evaluated_turns": len(evaluated),
            "strict_turns": sum(1 for t in evaluated if t.get("failed_checks") is not None),
            "rejected_turns": len(rejected),
            "rejected_correct_under_kernelbench": sum(
                1 for t in rejected if t.get("parity_status") == "correct"
            ),
            "rejections_by_check": metrics.rejections_by_check(rejected),
        },
        "library_share": {
            rules: metrics.share_summary(t.get("library_share") for t in turns if t is not None)
            for rules, turns in best.items()
        },
    }


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
    turn (strict mode's, and `best_kernelbench` under KernelBench's rules) and the turns as
    `Store.turn_summaries` gives them (idx, status, parity_status, failed_checks, speedup, library_share,
    runtime_ms, tokens, cost_usd, latency_s, ...).

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
        "trajectories": [
            {
                **{k: t[k] for k in keep},
                "best_kernelbench": _best_kernelbench(turns_of[t["id"]]),
                "turns": turns_of[t["id"]],
            }
            for t in trajs
        ],  # fmt: skip
    }


def _best_kernelbench(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """{"turn", "speedup", "library_share"} of the best turn under KernelBench's rules (all None if none)."""
    best = metrics.best_turn(turns, rules="kernelbench")
    if best is None:
        return {"turn": None, "speedup": None, "library_share": None}
    return {
        "turn": best["idx"],
        "speedup": metrics.counted_speedup(best, "kernelbench"),
        "library_share": best.get("library_share"),
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


__all__ = ["ReportError", "build_report", "level_label", "list_runs", "run_section", "show_run", "turn_code"]
