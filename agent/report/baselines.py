"""fast_p against the eager reference, against `torch.compile` and against the faster of the two, from the
baseline cache (`kb-agent baseline`, `agent.store.baselines`).

A run is compared only with baselines measured on its own GPU (its `gpu` column; `cpu` for a CPU dry run),
in its precision and under its torch version: a timing from another GPU never enters a figure. A
candidate's speedup over torch.compile is its own speedup over eager (reference and candidate timed in the
same process, the figure every other table uses, re-timed where the winner was) times the baseline's
`compile_ms / eager_ms` (both timed in the baseline's one process): ratios from one process each, so a
drift between processes cancels. Against the faster of the two it is times `min(1, compile_ms / eager_ms)`.
Problems without a stored baseline are left out of these tables (their denominators say how many count);
a problem whose torch.compile failed counts against eager in the "faster" column and is left out of the
torch.compile column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kb_agent.agent import metrics
from kb_agent.agent.store import Store
from kb_agent.agent.store.baselines import find_baselines

AGAINST = {"eager": "eager", "compile": "torch.compile", "best": "faster of the two"}


def baseline_key(run: dict[str, Any]) -> dict[str, str | None]:
    """The (gpu, precision, torch) a run's baselines must have been measured under: the run's GPU name
    (`cpu` for a CPU dry run), its precision, and the torch version its evaluations reported (else the
    one it recorded at start)."""
    device = (run.get("config") or {}).get("device")
    gpu = run.get("gpu") or ("cpu" if device == "cpu" else None)
    torch = (run.get("hardware") or {}).get("torch") or (run.get("versions") or {}).get("torch")
    return {"gpu": gpu, "precision": run.get("precision"), "torch": torch}


def baseline_section(
    store: Store,
    run: dict[str, Any],
    problems: Sequence[tuple[str, str]],
    bests: dict[str, metrics.Bests],
    compile_mode: str = "default",
    resamples: int = metrics.BOOTSTRAP_RESAMPLES,
    seed: int = metrics.BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """fast_p (per-problem view) against each baseline (AGAINST) under each rule.

    Args:
        problems: (problem key, reference SHA-256) of each problem of the run, in the order of `bests`.
        bests: rules -> per problem, per sample, the best counted speedup over eager (`metrics.sample_bests`).
        compile_mode: which torch.compile baseline (`default` or `max-autotune`).

    Returns:
        {"gpu", "precision", "torch", "compile_mode", "problems" (all), "covered" (with a baseline),
        "compile_failed" (covered, torch.compile failed), "missing" (keys without one, at most 20),
        "compile_over_eager" (geometric mean of eager_ms / compile_ms over the covered problems: above 1,
        torch.compile is faster), "fast_p" and "fast_p_kernelbench" (against -> fast_p table),
        "geomean_speedup" (rules -> against -> `metrics.geomean_speedup` over problems with a correct
        sample)}; or {"available": False, "reason"} when the run's GPU or torch version is unknown.
    """
    key = baseline_key(run)
    if key["gpu"] is None or key["torch"] is None:
        what = "GPU" if key["gpu"] is None else "torch version"
        return {**key, "compile_mode": compile_mode, "available": False,
                "reason": f"the run's {what} is unknown, so no baseline can be matched to it"}  # fmt: skip
    rows = find_baselines(store, **key, compile_mode=compile_mode)
    by_sha = {r["code_sha256"]: r for r in rows}
    idx = [i for i, (_, sha) in enumerate(problems) if sha in by_sha]
    ratio = [_ratio(by_sha[problems[i][1]]) for i in idx]  # compile_ms / eager_ms, None: compile failed
    out: dict[str, Any] = {
        **key, "compile_mode": compile_mode, "available": True, "problems": len(problems), "covered": len(idx),
        "compile_failed": sum(1 for r in ratio if r is None),
        "missing": [k for k, sha in problems if sha not in by_sha][:20],
        "compile_over_eager": metrics.geomean_speedup(None if r is None else 1.0 / r for r in ratio),
        "geomean_speedup": {},
    }  # fmt: skip
    for rules, field in (("strict", "fast_p"), ("kernelbench", "fast_p_kernelbench")):
        covered = [bests[rules][i] for i in idx]
        scaled = {
            "eager": covered,
            "compile": [_scale(s, r) for s, r in zip(covered, ratio, strict=True) if r is not None],
            "best": [
                _scale(s, 1.0 if r is None else min(1.0, r)) for s, r in zip(covered, ratio, strict=True)
            ],
        }
        out[field] = {
            a: [f.to_dict() for f in metrics.view_table(b, resamples=resamples, seed=seed)]
            for a, b in scaled.items()
        }
        out["geomean_speedup"][rules] = {
            a: metrics.geomean_speedup(metrics.problem_best(s) for s in b) for a, b in scaled.items()
        }
    return out


def _ratio(row: dict[str, Any]) -> float | None:
    if row.get("compile_ms") and row.get("eager_ms"):
        return float(row["compile_ms"]) / float(row["eager_ms"])
    return None


def _scale(samples: Sequence[float | None], factor: float) -> list[float | None]:
    return [None if s is None else s * factor for s in samples]


__all__ = ["AGAINST", "baseline_key", "baseline_section"]
