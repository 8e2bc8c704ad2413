"""Degenerate problems in a report: the stored `kb-agent problems check` findings of a run's problems
(`Store.problem_checks`, on the run's GPU and precision, of the very reference source the run worked on),
and which of them `report --exclude-degenerate` leaves out of its second fast_p table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from kb_agent.agent.store import Store

LOOSE_SUFFIX = "_loose"


def degenerate_flags(flags: list[str]) -> list[str]:
    """The flags that make a problem degenerate for a run in the checked precision: all but those seen
    only at another precision's looser tolerance (`..._loose`: a zero output passes at fp16's 1e-2, say,
    while the run was judged at fp32's 1e-4)."""
    return [f for f in flags if not f.endswith(LOOSE_SUFFIX)]


def checks_section(
    store: Store, run: dict[str, Any], sources: Mapping[str, Collection[str] | str]
) -> dict[str, Any]:
    """The problem checks of a run's problems, as a report section's `problem_checks`.

    Args:
        run: a row from `Store.get_run` (its `gpu`, or "cpu", and `precision` pick the checks).
        sources: problem key -> the SHA-256 (or set of them) of the reference source(s) the run worked
            on; a check of another source is not shown (checks stored before m006 have none and are).

    Returns:
        {"checked": problems with a finding ("ok" or "flagged"),
         "flagged": [{"problem", "flags", "findings": [{"flag", "fraction" (0..1 or None), "atol",
                     "rtol", "threshold", "precisions"}]}],
         "unchecked": [{"problem", "reason" ("package", "downloads", "memory", comma-joined), "message"}],
         "degenerate": the keys of the flagged problems with a `degenerate_flags` flag, sorted}.
    """
    wanted = {k: {v} if isinstance(v, str) else set(v) for k, v in sources.items()}
    checks = [c for c in store.problem_checks(run.get("gpu") or "cpu", run["precision"])
              if c["problem_key"] in wanted and (c.get("code_sha256") is None  # checked before m006
                                                 or c["code_sha256"] in wanted[c["problem_key"]])]  # fmt: skip
    found = [c for c in checks if c["status"] in ("ok", "flagged")]
    keep = ("flag", "fraction", "atol", "rtol", "threshold", "precisions")
    return {
        "checked": len(found),
        "flagged": [
            {
                "problem": c["problem_key"],
                "flags": c["flags"],
                "findings": [{k: f.get(k) for k in keep} for f in c.get("findings") or []],
            }
            for c in found
            if c["flags"]
        ],  # fmt: skip
        "unchecked": [
            {
                "problem": c["problem_key"],
                "reason": c.get("unchecked_reason"),
                "message": (c["details"] or [""])[-1],
            }
            for c in checks
            if c["status"] == "unchecked"
        ],  # fmt: skip
        "degenerate": sorted(c["problem_key"] for c in found if degenerate_flags(c["flags"])),
    }


def finding_text(f: dict[str, Any]) -> str:
    """One finding as printed: `mostly_zeros 79.8% at 0.0001`, `zeros_pass_loose at 0.01 (fp16, bf16)`,
    `nondeterministic 50.0%` (the share of elements that differ)."""
    text, fraction, threshold, atol = f["flag"], f.get("fraction"), f.get("threshold"), f.get("atol")
    if fraction is not None and threshold != 1.0:
        text += f" {fraction:.1%}"
    if atol is not None and threshold not in (None, 0.0):
        text += f" at {atol:g}"
    if f["flag"].endswith(LOOSE_SUFFIX) and f.get("precisions"):
        text += f" ({', '.join(f['precisions'])})"
    return text


def checks_line(s: dict[str, Any]) -> str:
    """The report line naming the degenerate problems, their findings, and the problems that could not
    be checked (with why)."""
    pc = s.get("problem_checks") or {"checked": 0, "flagged": []}
    flagged = "; ".join(
        f"{f['problem']} " + ", ".join(finding_text(x) for x in f.get("findings") or [{"flag": g} for g in f["flags"]])
        for f in pc["flagged"]
    ) or "none flagged"  # fmt: skip
    line = (
        f"degenerate problems (`kb-agent problems check`, {pc['checked']} of {s['problems']} checked on this "
        f"GPU and precision): {flagged}"
    )
    if pc.get("unchecked"):
        line += "; could not be checked: " + ", ".join(
            f"{u['problem']} ({u['reason']})" for u in pc["unchecked"]
        )
    return line


def excluded_title(s: dict[str, Any]) -> str:
    """The title of `--exclude-degenerate`'s table."""
    ex = s["excluding_degenerate"]
    names = ", ".join(ex["excluded"]) or "none"
    return (
        f"fast_p without the {len(ex['excluded'])} degenerate problem(s) ({names}; denominator: the other "
        f"{ex['problems']} problems; `_loose` flags do not count)"
    )


__all__ = [
    "LOOSE_SUFFIX",
    "checks_line",
    "checks_section",
    "degenerate_flags",
    "excluded_title",
    "finding_text",
]
