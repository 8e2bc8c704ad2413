"""Rescoring: every stored turn's code evaluated again under the current evaluator, the new verdicts kept
beside the old, and what changed.

    from kb_agent.agent.rescore import rescore
    rep = rescore(store, "my-run")       # {"changes": [...], "fast_p": {...}, "evaluator_version": ...}

A change to the evaluator (a new strict check, a fixed tolerance, another timing protocol) changes what
past runs mean. `rescore` evaluates the code of each turn of a run again, with the run's stored
settings (`SolveConfig.eval_settings`, as `solve` evaluated it), stores each new `EvalResult` in the
`rescores` table under `evaluator_version()` (never over the turn's own columns), and compares: which
turns changed verdict under strict mode or under KernelBench's rules, what made them change (the strict
checks that now fail or now pass, else the evaluator's message), and the fast_p figures before and after
over the same trajectories.

Rescoring is resumable: a turn already rescored under this evaluator version is not evaluated again
(`force=True` evaluates it anyway and replaces the stored rescoring). Turns without code (`no_code`,
`model_error`) have nothing to evaluate and keep their verdict.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kb_agent.agent import __version__, metrics
from kb_agent.agent.store import Store
from kb_agent.evaluator import Evaluator

log = logging.getLogger(__name__)

OnRescored = Callable[[dict[str, Any], str], None]
"""Called with (the stored turn, its new status) as each turn is rescored, for progress."""


@functools.cache
def evaluator_version() -> str:
    """The version of the evaluator this process runs: kb-agent's package version and the first 12 hex
    digits of a SHA-256 over the evaluator's Python sources (`evaluator/**/*.py`, by relative path), e.g.
    `0.1.0+3f2a9c0d1b7e`. Any edit of the evaluator (a threshold, a check, the timing) gives another
    version, without a release; computed once per process."""
    import kb_agent.evaluator

    return f"{__version__}+{_sources_digest(Path(kb_agent.evaluator.__file__).resolve().parent)}"


def _sources_digest(root: Path) -> str:
    """12 hex digits of a SHA-256 over the `*.py` files under `root` (relative path and bytes of each)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def rescore(
    store: Store,
    run_ref: str,
    *,
    evaluator: Evaluator | None = None,
    version: str | None = None,
    force: bool = False,
    on_rescored: OnRescored | None = None,
) -> dict[str, Any]:
    """Evaluate the code of every turn of run `run_ref` (id or name) again, store the results beside the
    old ones, and return what changed.

    Args:
        evaluator: what evaluates (an `Evaluator`); default the real one with the run's stored settings
            (`LocalEvaluator(job.evaluator_settings(config))`), one fresh child per turn, one at a time.
        version: the evaluator version the results are stored under; default `evaluator_version()`.
        force: evaluate turns already rescored under `version` again (else their stored rescoring is
            reused, so an interrupted rescoring continues where it stopped).
        on_rescored: called as each turn is rescored (not for reused ones).

    Returns:
        A JSON-serialisable dict: `run` (id, name, ...), `evaluator_version`, `turns` (turns with
        code), `rescored` (evaluated now), `reused`, `changes` (one dict per turn whose verdict changed
        under either rule: `problem`, `sample`, `turn`, `turn_id`, `status` and `parity_status` as
        [before, after], `checks_failing` and `checks_passing` (strict checks that fail now and did not
        before, and the reverse), `why` (one line)), `changes_by_check` (check -> changed turns it
        explains), and `fast_p` (rules -> one row per p: `p`, `before` and `after` as `FastP` dicts,
        `changed`), both over the run's attempted trajectories, before as `report` counts it (re-timed
        winners included) and after with the rescored verdicts and speedups.

    Raises:
        StoreError: no such run. UsageError: the run evaluated on CUDA and this machine has none.
        KeyboardInterrupt: propagates; every rescoring finished before it is stored.
    """
    run = store.get_run(run_ref)
    version = version or evaluator_version()
    if evaluator is None:
        evaluator = _run_evaluator(run)
    turns = store.run_turns(run["id"])
    with_code = [t for t in turns if t["code"] is not None]
    done = {r["turn_id"]: r for r in store.rescores(run["id"], version)}
    problems: dict[int, Any] = {}
    rescored = 0
    for turn in with_code:
        if turn["id"] in done and not force:
            continue
        traj_id = turn["trajectory_id"]
        if traj_id not in problems:
            problems[traj_id] = store.problem_of(traj_id)
        result = evaluator.evaluate(problems[traj_id], turn["code"])
        store.record_rescore(turn["id"], version, result)
        rescored += 1
        status = str(result.status)
        log.info("%s sample %d turn %d: %s (was %s)", turn["problem_key"], turn["sample"], turn["idx"],
                 status, turn["status"])  # fmt: skip
        if on_rescored is not None:
            on_rescored(turn, status)
    done = {r["turn_id"]: r for r in store.rescores(run["id"], version)}
    changes = [c for t in with_code if (c := _change(t, done.get(t["id"]))) is not None]
    return {
        "run": {k: run.get(k) for k in ("id", "name", "model", "backend", "precision", "gpu")},
        "evaluator_version": version,
        "turns": len(with_code),
        "rescored": rescored,
        "reused": sum(1 for t in with_code if t["id"] in done) - rescored,
        "changes": changes,
        "changes_by_check": _by_check(changes),
        "fast_p": _fast_p(store, run["id"], turns, done),
    }


def _run_evaluator(run: Mapping[str, Any]) -> Evaluator:
    """The real evaluator with the settings the run was evaluated with."""
    from kb_agent.agent.job import evaluator_settings
    from kb_agent.agent.loop import SolveConfig
    from kb_agent.evaluator import LocalEvaluator

    return LocalEvaluator(evaluator_settings(SolveConfig.from_dict(run.get("config") or {})))


def _failed(checks: list[str] | None) -> set[str]:
    return set(checks or ())


def _change(turn: Mapping[str, Any], new: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The verdict change of one turn (None when neither rule's verdict changed, or not rescored)."""
    if new is None:
        return None
    old_parity = turn["parity_status"] or turn["status"]
    if new["status"] == turn["status"] and new["parity_status"] == old_parity:
        return None
    failing = sorted(_failed(new["failed_checks"]) - _failed(turn["failed_checks"]))
    passing = sorted(_failed(turn["failed_checks"]) - _failed(new["failed_checks"]))
    message = str((new.get("eval_json") or {}).get("message") or "").strip().splitlines()
    if new["status"] == "rejected" and failing:
        why = "strict checks now failing: " + ", ".join(failing)
    elif turn["status"] == "rejected" and passing and new["status"] == "correct":
        why = "strict checks now passing: " + ", ".join(passing)
    else:
        why = message[0][:200] if message else new["status"]
    return {
        "problem": turn["problem_key"],
        "sample": turn["sample"],
        "turn": turn["idx"],
        "turn_id": turn["id"],
        "status": [turn["status"], new["status"]],
        "parity_status": [old_parity, new["parity_status"]],
        "checks_failing": failing,
        "checks_passing": passing,
        "why": why,
    }


def _by_check(changes: list[dict[str, Any]]) -> dict[str, int]:
    """Strict check -> number of changed turns that now fail it or now pass it, most first."""
    counts: Counter[str] = Counter()
    for c in changes:
        counts.update(c["checks_failing"] + c["checks_passing"])
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _rescored_turn(turn: Mapping[str, Any], new: Mapping[str, Any] | None) -> dict[str, Any]:
    """A turn record for `metrics` with the rescored verdict and speedup (the first re-timing of the
    winner belongs to the old evaluation and is dropped); the stored turn when it was not rescored."""
    if new is None:
        return dict(turn)
    keys = ("status", "correct", "speedup", "parity_status", "failed_checks", "library_share")
    return {**turn, **{k: new[k] for k in keys}, "retimed_status": None, "retimed_speedup": None}


def _fast_p(
    store: Store, run_id: str, turns: list[dict[str, Any]], new: Mapping[int, Mapping[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """fast_p before and after rescoring, per rules, over the run's attempted trajectories."""
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in turns:
        turns_of[t["trajectory_id"]].append(t)
    attempted = [t["id"] for t in store.trajectories(run_id) if turns_of[t["id"]] or t["outcome"] is not None]
    out: dict[str, list[dict[str, Any]]] = {}
    for rules in metrics.RULES:
        before = [metrics.best_speedup(turns_of[i], rules=rules) for i in attempted]
        after = [
            metrics.best_speedup([_rescored_turn(t, new.get(t["id"])) for t in turns_of[i]], rules=rules)
            for i in attempted
        ]
        rows = []
        for b, a in zip(metrics.fast_p_table(before), metrics.fast_p_table(after), strict=True):
            rows.append({"p": b.p, "before": b.to_dict(), "after": a.to_dict(), "changed": b != a})
        out[rules] = rows
    return out


def render_rescore_text(rep: Mapping[str, Any]) -> str:
    """The plain-text rescoring report: what was rescored, each changed verdict and why, the changes per
    strict check, and the fast_p figures that changed (both rules, before -> after, with denominators)."""
    run = rep["run"]
    lines = [
        f"run {run['name']} ({run['id']}) rescored under evaluator {rep['evaluator_version']}: "
        f"{rep['turns']} turn{'' if rep['turns'] == 1 else 's'} with code, {rep['rescored']} evaluated now, "
        f"{rep['reused']} already rescored",
    ]
    changes = rep["changes"]
    if not changes:
        lines.append("no verdict changed")
    else:
        lines.append(f"{len(changes)} verdict{'s' if len(changes) != 1 else ''} changed:")
        for c in changes:
            (sb, sa), (pb, pa) = c["status"], c["parity_status"]
            verdict = f"{sb} -> {sa}"
            if pb == pa:
                verdict += f" (KernelBench's rules: still {pa})"
            elif (pb, pa) != (sb, sa):
                verdict += f" (KernelBench's rules: {pb} -> {pa})"
            lines.append(f"  {c['problem']} sample {c['sample']} turn {c['turn']}: {verdict}; {c['why']}")
    if rep["changes_by_check"]:
        lines.append(
            "changes by strict check: " + ", ".join(f"{k} {n}" for k, n in rep["changes_by_check"].items())
        )
    label = {"strict": "strict mode", "kernelbench": "KernelBench's rules"}
    changed = [(rules, row) for rules, rows in rep["fast_p"].items() for row in rows if row["changed"]]
    if not changed:
        lines.append("no fast_p figure changed")
    else:
        lines.append("fast_p changed (best turn of each trajectory, before -> after):")
        for rules, row in changed:
            b, a = row["before"], row["after"]
            lines.append(f"  {label.get(rules, rules)} fast_{row['p']:.1f}: {_frac(b)} -> {_frac(a)}")
    return "\n".join(lines) + "\n"


def _frac(f: Mapping[str, Any]) -> str:
    value = "-" if f["value"] is None else f"{f['value']:.3f}"
    return f"{value} ({f['numerator']}/{f['denominator']})"


__all__ = ["OnRescored", "evaluator_version", "render_rescore_text", "rescore"]
