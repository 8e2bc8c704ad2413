"""`report RUN_A RUN_B --paired`: two runs on identical problems (and, for forks, identical prefixes),
compared problem by problem: fast_p of each, the difference B - A with a bootstrap interval that
resamples problems (seeded), and a sign test over problems on their best speedups.

A problem counts by the best of its samples (the report's per-problem view). Problems are matched by
key and reference source (SHA-256); those in only one run are left out and named. When one run is a
fork of the other, or both are forks of one run at the same turn K, every paired trajectory's turns
1..K-1 must hold the same replies, else the comparison is refused.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kb_agent.agent import metrics
from kb_agent.agent.report.build import ReportError
from kb_agent.agent.report.text import fmt_p, text_table
from kb_agent.agent.store import Store


def _bests(store: Store, run: dict[str, Any]) -> tuple[dict[tuple[str, str], float | None], dict]:
    """(problem key, reference sha) -> best speedup over the run's samples; and (key, sample) -> turns."""
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in store.turn_summaries(run["id"]):
        turns_of[t["trajectory_id"]].append(t)
    samples: dict[tuple[str, str], list[float | None]] = defaultdict(list)
    by_sample = {}
    for t in store.trajectories(run["id"]):
        key = (t["problem_key"], store.problem_of(t).code_sha256)
        samples[key].append(metrics.best_speedup(turns_of[t["id"]]))
        by_sample[(t["problem_key"], t["sample"])] = t["id"]
    return {k: metrics.problem_best(v) for k, v in samples.items()}, by_sample


def _prefix_turns(a: dict[str, Any], b: dict[str, Any]) -> int:
    """How many leading turns the two runs must share: K-1 of a fork of the other or of a common source."""
    fa, fb = (a["config"] or {}).get("forked_from"), (b["config"] or {}).get("forked_from")
    if fb and fb["run"] == a["id"]:
        return fb["turn"] - 1
    if fa and fa["run"] == b["id"]:
        return fa["turn"] - 1
    if fa and fb and fa["run"] == fb["run"]:
        if fa["turn"] != fb["turn"]:
            raise ReportError(f"the two forks copy different prefixes (turn {fa['turn']} and {fb['turn']}); "
                              "pair forks made at the same turn")  # fmt: skip
        return fa["turn"] - 1
    return 0


def paired_report(
    store: Store,
    ref_a: str,
    ref_b: str,
    *,
    resamples: int = metrics.BOOTSTRAP_RESAMPLES,
    seed: int = metrics.BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """The paired comparison of runs `ref_a` and `ref_b` (ids or names) as a dict: runs (name, id),
    problems (paired), left_out (keys in one run only), prefix_turns (turns 1..N shared by construction),
    fast_p (`metrics.paired_fast_p`: a, b, diff = b - a, ci95), sign_test (`metrics.sign_test`),
    bootstrap {resamples, seed, unit}.

    Raises:
        StoreError: an unknown run. ReportError: no problem in common, runs of different GPUs or
            precisions, or a fork whose copied prefix differs from its source's.
    """
    a, b = store.get_run(ref_a), store.get_run(ref_b)
    for field in ("gpu", "precision"):
        if a[field] != b[field]:
            raise ReportError(f"runs {a['name']} and {b['name']} differ in {field} ({a[field]} vs {b[field]}); "
                              "pair runs measured alike")  # fmt: skip
    best_a, traj_a = _bests(store, a)
    best_b, traj_b = _bests(store, b)
    common = sorted(set(best_a) & set(best_b))
    if not common:
        raise ReportError(
            f"runs {a['name']} and {b['name']} share no problem (same key and reference source)"
        )
    prefix = _prefix_turns(a, b)
    if prefix:
        for key in sorted(set(traj_a) & set(traj_b)):
            ra = [t["response"] for t in store.turns(traj_a[key]) if t["idx"] <= prefix]
            rb = [t["response"] for t in store.turns(traj_b[key]) if t["idx"] <= prefix]
            if ra != rb:
                raise ReportError(f"{key[0]} sample {key[1]}: turns 1..{prefix} differ between {a['name']} and "
                                  f"{b['name']}, so the prefix is not controlled")  # fmt: skip
    xs, ys = [best_a[k] for k in common], [best_b[k] for k in common]
    left = sorted({k[0] for k in set(best_a) ^ set(best_b)})
    return {
        "runs": [{"name": r["name"], "id": r["id"]} for r in (a, b)],
        "problems": len(common),
        "left_out": left,
        "prefix_turns": prefix,
        "fast_p": metrics.paired_fast_p(xs, ys, metrics.P_VALUES, resamples, seed),
        "sign_test": metrics.sign_test(xs, ys),
        "bootstrap": {"resamples": resamples, "seed": seed, "unit": "problems", "level": metrics.CI_LEVEL},
    }


def render_paired_text(r: dict[str, Any]) -> str:
    """The paired comparison as plain text: a header, one row per p, the sign test."""
    a, b = (x["name"] for x in r["runs"])
    ci = lambda c: "-" if c is None else f"[{c[0]:+.3f}, {c[1]:+.3f}]"  # noqa: E731
    rows = [
        [fmt_p(f["p"]), f"{f['a']:.3f}", f"{f['b']:.3f}", f"{f['diff']:+.3f}", ci(f["ci95"])]
        for f in r["fast_p"]
    ]
    st = r["sign_test"]
    prefix = (
        f"turns 1..{r['prefix_turns']} identical in every pair" if r["prefix_turns"] else "no shared prefix"
    )
    lines = [
        f"paired: A = {a}, B = {b}; {r['problems']} problems in both ({prefix})",
        *([f"left out (in one run only): {', '.join(r['left_out'])}"] if r["left_out"] else []),
        text_table(
            [
                "p",
                "fast_p A",
                "fast_p B",
                "B - A",
                f"{r['bootstrap']['level']:.0%} CI (bootstrap over problems, "
                f"{r['bootstrap']['resamples']} resamples, seed {r['bootstrap']['seed']})",
            ],
            rows,
        ),  # fmt: skip
        f"sign test over problems (best speedup, none = 0): B faster on {st['wins']}, A faster on {st['losses']}, "
        f"ties {st['ties']}; two-sided p = {st['p_value']:.3g}",
    ]
    return "\n".join(lines) + "\n"


__all__ = ["paired_report", "render_paired_text"]
