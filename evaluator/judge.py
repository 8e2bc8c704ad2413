"""The one judge: a pure function from what an evaluation recorded to its status and message.

The child and the parent only record facts: the outcome KernelBench's rules give (the status the stages
reached, `parity_status`, with the message a model needs), each strict check with its measurement
(`evaluator.strict.Checks`), and the child's fate as the parent saw it (a verdict sent, a stage past its
limit, the memory limit, a crash, forged lines on the result channel, processes left running).
`judge` turns them into the final status. Nothing else sets or edits a status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kb_agent.evaluator.result import Status


@dataclass(frozen=True)
class Fate:
    """How the evaluation child ended, as the parent saw it.

    Attributes:
        ended: "done" (it sent its outcome), "timeout" (a stage ran past its limit), "memory" (the
            process group used more host memory than allowed) or "died" (exited or crashed without an
            outcome).
        message: for every ending but "done", what happened, in a sentence for the model.
        forged: lines on the result channel that were not the evaluator's (their signature failed).
        leftovers: processes the candidate left running after the outcome (killed since).
    """

    ended: str
    message: str = ""
    forged: int = 0
    leftovers: int = 0


@dataclass(frozen=True)
class Judgement:
    status: Status
    message: str
    checks: dict[str, dict[str, Any]]  # the strict checks judged, the parent's own facts included


def judge(
    parity_status: Status | str | None,
    parity_message: str,
    strict: Mapping[str, Any] | None,
    fate: Fate,
) -> Judgement:
    """The status of one evaluation.

    Args:
        parity_status: the status KernelBench's rules give (the furthest stage the candidate passed);
            None when the child sent no outcome.
        parity_message: the message that goes with it.
        strict: strict mode's record (`{"checks": {name: {"passed", "detail"}}, "broke_rule": bool,
            ...}`), None in parity mode.
        fate: how the child ended.

    Returns:
        The status, the message, and the checks it judged. The rules, in order:
        1. a stage past its limit: TIMEOUT; past the memory limit: RUNTIME_ERROR;
        2. forged channel lines: REJECTED (no outcome on that channel can be trusted), naming the strict
           checks that also failed, the likelier cause;
        3. no outcome (a crash, an exit): RUNTIME_ERROR with the fate's message;
        4. strict mode: a failed check rejects a candidate KernelBench's rules call correct; one that
           was caught trying something the sandbox or audit hook refused (`broke_rule`) is rejected
           whatever its parity status, since the failure it met was of its own making;
        5. else the parity outcome.
    """
    checks = {k: dict(v) for k, v in ((strict or {}).get("checks") or {}).items()}
    if strict is not None and fate.leftovers:
        checks["processes"] = {"passed": False, "detail": f"left {fate.leftovers} process(es) running"}
    failures = [f"{k}: {v['detail']}" for k, v in checks.items() if not v.get("passed")]
    if fate.ended == "timeout":
        return Judgement(Status.TIMEOUT, fate.message, checks)
    if fate.ended == "memory":
        return Judgement(Status.RUNTIME_ERROR, fate.message, checks)
    if fate.forged:
        message = (
            f"rejected: {fate.forged} message(s) on the evaluator's private result channel were not the "
            "evaluator's (a candidate must not write to the evaluator's file descriptors)"
        )
        shown = [f for f in failures if not f.endswith(": ")]
        if shown:
            message += "\nstrict mode's checks also failed:\n" + "\n".join(f"- {f}" for f in shown)
        return Judgement(Status.REJECTED, message, checks)
    if fate.ended == "died" or parity_status is None:
        return Judgement(Status.RUNTIME_ERROR, fate.message or "the evaluation sent no outcome", checks)
    status = Status(parity_status)
    broke_rule = bool((strict or {}).get("broke_rule"))
    if strict is not None and failures and (status == Status.CORRECT or broke_rule):
        return Judgement(
            Status.REJECTED, "rejected by strict mode:\n" + "\n".join(f"- {f}" for f in failures), checks
        )
    return Judgement(status, parity_message, checks)
