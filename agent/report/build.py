"""The building half of the reports: JSON-serialisable dicts made from the store (what `--json` prints,
what tests check, what `text` and `terminal` render). Nothing here prints.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from kb_agent.agent import metrics
from kb_agent.agent.report.baselines import baseline_section
from kb_agent.agent.report.degenerate import checks_section
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


def seconds_device(run: dict[str, Any]) -> str:
    """Where a run's correctness and timing stages ran, as the report labels their seconds: "CPU" for a
    run made with `--device cpu` (`_run_summary`'s `device`), else "GPU"."""
    return "CPU" if run.get("device") == "cpu" else "GPU"


def never_answered(turns: list[dict[str, Any]]) -> bool:
    """Whether a trajectory's model was asked and never answered: it has turns, all of them model errors
    (`Store.turn_summaries` rows)."""
    return bool(turns) and all(t["status"] == "model_error" for t in turns)


def run_section(
    store: Store,
    run: dict[str, Any],
    by_turn: bool = False,
    *,
    by_budget: bool = False,
    resamples: int = metrics.BOOTSTRAP_RESAMPLES,
    seed: int = metrics.BOOTSTRAP_SEED,
    compile_mode: str = "default",
    exclude_degenerate: bool = False,
) -> dict[str, Any]:
    """The report of one run (a row from `Store.get_run`).

    Counting: one trajectory = one (problem, sample). A trajectory is attempted once it has a turn or
    an outcome; one without a correct turn counts as a failure. Trajectories created but never started
    (an interrupted run) are reported as `not_started` and left out; so are those the model never
    answered (`unanswered`: every turn a model error, e.g. a provider outage; `solve --resume` retries
    the unavailable ones), which say nothing of the kernels. With several samples per problem
    the headline figures count problems (a problem counts when the best of its samples is correct and
    faster than p; denominator: problems) and `per_trajectory` gives the figures with every sample
    counted on its own (denominator: trajectories), with `fast_p_at_k` (Chen et al.'s unbiased estimator,
    `metrics.fast_p_at_k`) between them; with one sample the views coincide and those two are None.
    Every fast_p has `ci95`, a bootstrap interval over problems (`metrics.bootstrap_ci`; `resamples` 0:
    none). Tokens and cost are summed over every turn; `per_problem` divides by the number of attempted
    problems. Cost is in US dollars, None when no call had a known price.

    fast_p comes twice over the same problems: `fast_p` under strict mode (the evaluator's verdict) and
    `fast_p_kernelbench` under KernelBench's rules alone (a turn strict mode rejected counts by its
    `parity_status`); `strict` says how many turns strict mode judged and rejected, per check;
    `library_share` summarises the share of GPU time in library kernels of each rule's best turns
    (`metrics.share_summary`, fractions 0..1). Also: `geomean_speedup` (rules -> view -> geometric mean
    of the best speedups of correct trajectories / problems), `per_level`, `problems_table` (one row per
    problem), `status_by_turn` (`metrics.status_by_turn`), `best_speedups` (rules -> each trajectory's
    best counted speedup or None, for the distribution), `baselines` (`report.baselines.baseline_section`),
    `by_turn` (k = 1..K, when asked) and `by_budget` (budget -> [{"budget", "fast_p",
    "fast_p_kernelbench"}] against cumulative tokens, dollars and device seconds, `metrics.BUDGETS`, when
    asked). `gpu_s` ({"total", "per_problem", "device"}) and `by_budget["gpu_s"]` count the seconds of the
    correctness and timing stages on the run's device: the key keeps its name for existing readers, and
    `gpu_s["device"]` says which device it was, "GPU" or "CPU" (a `--device cpu` run; `seconds_device`). `problem_checks`: the stored `problems check` findings of the run's problems
    (`report.degenerate.checks_section`); with `exclude_degenerate`, `excluding_degenerate` holds
    {"excluded": the problems flagged degenerate, "problems": those left, "fast_p",
    "fast_p_kernelbench"} over the problems left (None otherwise). `usage`: {"total": model calls,
    evaluations, turns and copied turns summed, "per_trajectory": one `metrics.usage` row per
    trajectory with its problem and sample}, counted over each trajectory's tree of turns.
    `eval_seconds`: where the evaluations' wall time went (`eval_seconds_section`).
    """
    trajs = store.trajectories(run["id"])
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in store.turn_summaries(run["id"]):
        turns_of[t["trajectory_id"]].append(t)
    unanswered = [t for t in trajs if never_answered(turns_of[t["id"]])]
    attempted = [t for t in trajs if (turns_of[t["id"]] or t["outcome"] is not None) and t not in unanswered]
    all_turns = [turn for t in attempted for turn in turns_of[t["id"]]]
    levels = sorted({t["level"] for t in attempted}, key=lambda lv: (lv is None, lv if lv is not None else 0))
    max_turn = max((turn["idx"] for turn in all_turns), default=0)
    trajs_turns = [turns_of[t["id"]] for t in attempted]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)  # problem key -> its attempted trajectories
    for t in attempted:
        groups[t["problem_key"]].append(t)
    grouped = [[turns_of[t["id"]] for t in ts] for ts in groups.values()]
    n_samples = [len(ts) for ts in groups.values()]
    boot = {"resamples": resamples, "seed": seed}

    section: dict[str, Any] = {
        "run": _run_summary(run),
        "levels": levels,
        "level": ", ".join(level_label(lv) for lv in levels) or "none",
        "problems": len(groups),
        "trajectories": len(attempted),
        "not_started": len(trajs) - len(attempted) - len(unanswered),
        "unanswered": len(unanswered),
        "turns": len(all_turns),
        "max_turn": max_turn,
        "samples": {"max": max(n_samples, default=0), "min": min(n_samples, default=0)},
        "bootstrap": {**boot, "level": metrics.CI_LEVEL, "unit": "problems"},
        **_both_rules(grouped, all_turns, boot),
        "by_turn": None,
        "by_budget": None,
    }
    section["status_by_turn"] = metrics.status_by_turn(trajs_turns, max_turn)
    section["per_level"] = _per_level(groups, turns_of, boot)
    section["problems_table"] = _problems_table(groups, turns_of)
    sources = {k: store.problem_of(ts[0]).code_sha256 for k, ts in groups.items()}
    bests = {rules: metrics.sample_bests(grouped, rules=rules) for rules in metrics.RULES}
    section["baselines"] = baseline_section(store, run, list(sources.items()), bests, compile_mode, **boot)
    if by_turn:
        tables = {r: metrics.by_turn_view(grouped, max_turn, rules=r, **boot) for r in metrics.RULES}
        section["by_turn"] = [
            {"k": k, "fast_p": [f.to_dict() for f in tables["strict"][k]],
             "fast_p_kernelbench": [f.to_dict() for f in tables["kernelbench"][k]]}
            for k in tables["strict"]
        ]  # fmt: skip
    if by_budget:
        section["by_budget"] = {}
        for budget in metrics.BUDGETS:
            points = metrics.budget_points(grouped, budget)
            curves = {r: metrics.by_budget(grouped, budget, points, rules=r, **boot) for r in metrics.RULES}
            section["by_budget"][budget] = [
                {"budget": b, "fast_p": [f.to_dict() for f in strict],
                 "fast_p_kernelbench": [f.to_dict() for f in kb]}
                for (b, strict), (_, kb) in zip(curves["strict"], curves["kernelbench"], strict=True)
            ]  # fmt: skip
    problems = len(groups)
    for key in ("tokens_in", "tokens_out", "cost_usd", "gpu_s"):
        total = _sum([turn.get(key) for turn in all_turns])
        section[key] = {"total": total, "per_problem": _per(total, problems)}
    section["gpu_s"]["device"] = seconds_device(section["run"])
    section["problem_checks"] = checks_section(store, run, sources)
    section["excluding_degenerate"] = None
    if exclude_degenerate:  # fast_p again over the problems no check flagged as degenerate
        out = set(section["problem_checks"]["degenerate"])
        kept = {k: ts for k, ts in groups.items() if k not in out}
        kept_turns = [turn for ts in kept.values() for t in ts for turn in turns_of[t["id"]]]
        figures = _both_rules([[turns_of[t["id"]] for t in ts] for ts in kept.values()], kept_turns, boot)
        section["excluding_degenerate"] = {
            "excluded": sorted(out),
            "problems": len(kept),
            "fast_p": figures["fast_p"],
            "fast_p_kernelbench": figures["fast_p_kernelbench"],
        }
    section["usage"] = _usage(attempted, turns_of)
    section["eval_seconds"] = eval_seconds_section(all_turns)
    section["outcomes"] = dict(Counter(t["outcome"] or "unfinished" for t in attempted).most_common())
    section["statuses"] = dict(Counter(turn["status"] or "pending" for turn in all_turns).most_common())
    return section


# a turn's seconds columns (`Store.turn_summaries`, `rows.eval_seconds`) -> the stage they time
EVAL_SECONDS = {"setup_s": "setup", "build_s": "build", "run_s": "run", "eval_s": "total"}


def eval_seconds_section(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Wall seconds per evaluation over the turns this run evaluated (a fork's copied turns and the
    re-timing of each trajectory's best turn left out): {"evaluations": how many, and for each of
    "setup" (the child's start and imports), "build" (import and extension builds), "run" (correctness
    + timing, the GPU's work) and "total" (the whole evaluation): {"n": evaluations that reached the
    stage, "median", "total"} in seconds (None where n is 0)}."""
    evaluated = [t for t in turns if t.get("evaluation")]
    out: dict[str, Any] = {"evaluations": len(evaluated)}
    for column, stage in EVAL_SECONDS.items():
        known = [float(t[column]) for t in evaluated if t.get(column) is not None]
        out[stage] = {"n": len(known), "median": statistics.median(known) if known else None,
                      "total": sum(known) if known else None}  # fmt: skip
    return out


def _usage(trajs: list[dict[str, Any]], turns_of: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Model calls and evaluations: the run's totals and, per trajectory (problem, sample), what
    `metrics.usage` counts over its tree of turns."""
    rows = [{"problem": t["problem_key"], "sample": t["sample"], **metrics.usage(turns_of[t["id"]])}
            for t in trajs]  # fmt: skip
    keys = ("turns", "model_calls", "evaluations", "reused", "copied")
    return {"total": {k: sum(r[k] for r in rows) for k in keys}, "per_trajectory": rows}


def _both_rules(
    grouped: list[list[list[dict[str, Any]]]], all_turns: list[dict[str, Any]], boot: dict[str, int]
) -> dict[str, Any]:
    """fast_p under both rules over the same problems (per problem, and per trajectory and @k when there
    are several samples), geometric-mean speedups, strict mode's rejections, library shares."""
    bests = {rules: metrics.sample_bests(grouped, rules=rules) for rules in metrics.RULES}
    several = any(len(s) > 1 for s in grouped)
    table = lambda rules, view: [f.to_dict() for f in metrics.view_table(bests[rules], view=view, **boot)]  # noqa: E731
    best = {
        rules: [metrics.best_turn(turns, rules=rules) for samples in grouped for turns in samples]
        for rules in metrics.RULES
    }
    evaluated = [t for t in all_turns if t["status"] not in (None, "no_code", "model_error")]
    rejected = [t for t in all_turns if t["status"] == "rejected"]
    return {
        "fast_p": table("strict", "problem"),
        "fast_p_kernelbench": table("kernelbench", "problem"),
        "per_trajectory": {"fast_p": table("strict", "trajectory"),
                           "fast_p_kernelbench": table("kernelbench", "trajectory")} if several else None,
        "fast_p_at_k": {
            rules: [{"k": k, "fast_p": [f.to_dict() for f in row]}
                    for k, row in metrics.fast_p_at_k(bests[rules], **boot).items()]
            for rules in metrics.RULES
        } if several else None,
        "geomean_speedup": {
            rules: {"trajectory": metrics.geomean_speedup(s for samples in bests[rules] for s in samples),
                    "problem": metrics.geomean_speedup(metrics.problem_best(s) for s in bests[rules])}
            for rules in metrics.RULES
        },
        "best_speedups": {rules: [s for samples in bests[rules] for s in samples] for rules in metrics.RULES},
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
    }  # fmt: skip


def _per_level(
    groups: dict[str, list[dict[str, Any]]], turns_of: dict[int, list[dict[str, Any]]], boot: dict[str, int]
) -> list[dict[str, Any]]:
    """fast_p (per-problem view, both rules, with intervals) and the geometric-mean speedup per level."""
    by_level: dict[Any, list[list[list[dict[str, Any]]]]] = defaultdict(list)
    for ts in groups.values():
        by_level[ts[0]["level"]].append([turns_of[t["id"]] for t in ts])
    out = []
    for lv in sorted(by_level, key=lambda lv: (lv is None, lv if lv is not None else 0)):
        grouped = by_level[lv]
        row: dict[str, Any] = {"level": level_label(lv), "problems": len(grouped),
                               "trajectories": sum(len(s) for s in grouped)}  # fmt: skip
        for rules, field in (("strict", "fast_p"), ("kernelbench", "fast_p_kernelbench")):
            bests = metrics.sample_bests(grouped, rules=rules)
            row[field] = [f.to_dict() for f in metrics.view_table(bests, **boot)]
            row[f"geomean_speedup{'' if rules == 'strict' else '_kernelbench'}"] = metrics.geomean_speedup(
                metrics.problem_best(s) for s in bests
            )
        out.append(row)
    return out


def _problems_table(
    groups: dict[str, list[dict[str, Any]]], turns_of: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """One row per problem: key, name, level, samples, correct samples and best speedup under each rule,
    and the first turn at which any sample was correct (strict)."""
    rows = []
    for key, ts in groups.items():
        samples = [turns_of[t["id"]] for t in ts]
        row: dict[str, Any] = {"problem": key, "name": ts[0]["problem_name"], "level": level_label(ts[0]["level"]),
                               "samples": len(ts)}  # fmt: skip
        for rules, suffix in (("strict", ""), ("kernelbench", "_kernelbench")):
            bests = [metrics.best_speedup(turns, rules=rules) for turns in samples]
            row[f"correct_samples{suffix}"] = sum(1 for b in bests if b is not None)
            row[f"best_speedup{suffix}"] = metrics.problem_best(bests)
        firsts = [min((t["idx"] for t in turns if metrics.counted_speedup(t) is not None), default=None)
                  for turns in samples]  # fmt: skip
        row["first_correct_turn"] = min((f for f in firsts if f is not None), default=None)
        rows.append(row)
    return rows


def build_report(
    store: Store,
    run_refs: Sequence[str] | None = None,
    by_turn: bool = False,
    *,
    by_budget: bool = False,
    resamples: int = metrics.BOOTSTRAP_RESAMPLES,
    seed: int = metrics.BOOTSTRAP_SEED,
    compile_mode: str = "default",
    exclude_degenerate: bool = False,
) -> dict[str, Any]:
    """Best-of-trajectory fast_p for one or more runs, each in its own section.

    Args:
        store: the trajectory store.
        run_refs: run ids or names; None or empty = the latest run.
        by_turn: add, per run, fast_p of the best correct turn up to turn k for k = 1..K.
        by_budget: add, per run, fast_p against cumulative tokens, dollars and GPU-seconds.
        resamples, seed: the bootstrap intervals (resampling problems; 0 resamples: no intervals).
        compile_mode: which torch.compile baseline to compare with (`default` or `max-autotune`).
        exclude_degenerate: add, per run, fast_p over the problems that `problems check` did not flag
            as degenerate, beside the figures over all of them.

    Returns:
        {"p_values": [...], "runs": [section, ...]}; see `run_section` for a section's fields.

    Raises:
        StoreError: an unknown run, or no runs at all.
        ReportError: the runs differ in GPU or precision, so their figures must not share a table; an
            unknown compile mode.
    """
    from kb_agent.agent.store.baselines import COMPILE_MODES

    if compile_mode not in COMPILE_MODES:
        raise ReportError(f"unknown compile mode {compile_mode!r}; choose one of {', '.join(COMPILE_MODES)}")
    if resamples < 0:
        raise ReportError(f"--bootstrap must be 0 (no intervals) or more resamples, not {resamples}")
    runs = [store.get_run(r) for r in run_refs] if run_refs else [store.latest_run()]
    runs = list({r["id"]: r for r in runs}.values())  # a run named twice is reported once
    for field, label in (("gpu", "GPU"), ("precision", "precision")):
        seen = {r[field] for r in runs}
        if len(seen) > 1:
            which = ", ".join(f"{r['name']}: {r[field] or 'unknown'}" for r in runs)
            raise ReportError(
                f"runs with different {label}s cannot be reported together ({which}); report them one at a time"
            )
    kw = dict(by_budget=by_budget, resamples=resamples, seed=seed, compile_mode=compile_mode,
              exclude_degenerate=exclude_degenerate)  # fmt: skip
    return {"p_values": list(metrics.P_VALUES), "runs": [run_section(store, r, by_turn, **kw) for r in runs]}


def _resolved_keys(spec: str) -> set[str]:
    """The keys of the problems `spec` names as `solve --problem` reads it (`toy/1_relu`, level `0` for
    the toy set, a range), or none where it names none here (a store read away from its dataset)."""
    from kb_agent.problems import resolve

    try:
        return {p.key for p in resolve(spec)}
    except (KBAgentError, OSError, ValueError):
        return set()


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

        matched = [t for t in out if match(t)]
        if not matched:  # the spec forms solve takes (resolved once, only when the stored names match none)
            keys = _resolved_keys(spec)
            matched = [t for t in out if t["problem_key"] in keys]
        out = matched
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


__all__ = [
    "ReportError",
    "build_report",
    "level_label",
    "list_runs",
    "run_section",
    "seconds_device",
    "show_run",
    "turn_code",
]
