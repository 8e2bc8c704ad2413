"""The one judge (evaluator/judge.py): every status from recorded facts, no child process needed."""

import pytest
from kb_agent.evaluator.judge import Fate, judge
from kb_agent.evaluator.result import Status

DONE = Fate("done")


def strict(*failed: str, broke_rule: bool = False, passed: tuple[str, ...] = ("static",)) -> dict:
    checks = {name: {"passed": True, "detail": ""} for name in passed}
    checks.update({name: {"passed": False, "detail": f"{name} failed"} for name in failed})
    return {"enabled": True, "parity_status": "correct", "checks": checks, "broke_rule": broke_rule}


def test_parity_mode_returns_the_parity_outcome():
    for status in Status:
        j = judge(status, "why", None, DONE)
        assert (j.status, j.message) == (status, "why")


def test_a_failed_check_rejects_a_correct_candidate_and_names_every_failure():
    j = judge("correct", "correct", strict("no_replay", "tampering"), DONE)
    assert j.status == Status.REJECTED
    assert "- no_replay: no_replay failed" in j.message and "- tampering: tampering failed" in j.message


def test_passed_checks_leave_a_correct_candidate_correct():
    assert judge("correct", "correct", strict(), DONE).status == Status.CORRECT


@pytest.mark.parametrize("status", ["incorrect", "runtime_error", "compile_error"])
def test_a_failed_check_does_not_hide_a_parity_failure(status):
    j = judge(status, "mismatch", strict("no_replay"), DONE)
    assert (j.status, j.message) == (Status(status), "mismatch")


def test_a_blocked_attempt_is_rejected_whatever_its_parity_status():
    j = judge("runtime_error", "PermissionError", strict("side_effects", broke_rule=True), DONE)
    assert j.status == Status.REJECTED and "side_effects" in j.message


def test_processes_left_running_fail_the_processes_check_in_strict_mode_only():
    fate = Fate("done", leftovers=2)
    j = judge("correct", "correct", strict(), fate)
    assert j.status == Status.REJECTED and "processes: left 2 process(es) running" in j.message
    assert j.checks["processes"] == {"passed": False, "detail": "left 2 process(es) running"}
    assert judge("correct", "correct", None, fate).status == Status.CORRECT


def test_the_childs_fate_comes_first():
    assert (
        judge("correct", "x", strict(), Fate("timeout", "the timing stage ran past")).status == Status.TIMEOUT
    )
    j = judge("correct", "x", strict(), Fate("memory", "too much"))
    assert (j.status, j.message) == (Status.RUNTIME_ERROR, "too much")
    j = judge(None, "", None, Fate("died", "killed by SIGSEGV"))
    assert (j.status, j.message) == (Status.RUNTIME_ERROR, "killed by SIGSEGV")


def test_forged_lines_reject_and_list_the_strict_failures_beside():
    j = judge("correct", "correct", strict("side_effects"), Fate("done", forged=3))
    assert j.status == Status.REJECTED
    assert (
        j.message.startswith("rejected: 3 message(s)") and "- side_effects: side_effects failed" in j.message
    )
    # even when no valid outcome came at all: the channel was written by someone else
    assert judge(None, "", None, Fate("done", forged=1)).status == Status.REJECTED


def test_judge_does_not_edit_its_input():
    record = strict()
    judge("correct", "correct", record, Fate("done", leftovers=1))
    assert "processes" not in record["checks"]
