"""Where the reference raises on a judged call's values, the call is no check; that may not be a way for
a candidate to have its calls go unchecked (helper-27: a `random.seed` of its own raised exactly where
the harness seeded for the reference, and every judged call and every scaled strict trial went
unchecked). `strict_trials.reference_refused` and the checked call's count, with the reference given."""

import types

import pytest
import torch
from kb_agent.evaluator.compare import clone_args
from kb_agent.evaluator.stages.strict_trials import reference_refused
from kb_agent.evaluator.stages.timing import _layout, checked_call
from kb_agent.evaluator.strict import Checks


def evaluation(reference, draw):
    return types.SimpleNamespace(
        torch=torch, checks=Checks(), strict_info={}, atol=1e-4, rtol=1e-4, sync=lambda: None, dispatch_guard=None,
        draw_inputs=draw, clone=clone_args, new_model=torch.relu, ref_model=reference,
    )  # fmt: skip


def refuses(x):
    raise RuntimeError("the reference does not take these values")


def failed(ev) -> set[str]:
    return {name for name, c in ev.checks.checks.items() if not c["passed"]}


def test_the_reference_raising_on_a_draw_of_get_inputs_fails_reference_ran():
    # the correctness trials ran it on such draws: raising now is the process's state, not the values
    timed = [torch.randn(64)]
    ev = evaluation(refuses, lambda: [torch.randn(64)])
    checked_call(ev, timed, _layout(torch, timed))
    assert failed(ev) == {"reference_ran"}
    assert "drawn from get_inputs()" in ev.checks.checks["reference_ran"]["detail"]
    assert ev.strict_info["reference_raised"][0]["call"].startswith("a call on the timed tensors")


def test_the_reference_raising_on_every_judged_call_fails_reference_ran():
    # a draw of other sizes fits no timed tensor: the checked call gets offsets, which may leave the
    # reference's domain, but not one judged call checked is no check at all
    timed = [torch.randn(64)]
    ev = evaluation(refuses, lambda: [torch.randn(65)])
    checked_call(ev, timed, _layout(torch, timed))
    assert failed(ev) == {"reference_ran"}
    assert "every call" in ev.checks.checks["reference_ran"]["detail"]


def test_offsets_the_reference_refuses_are_no_check_where_another_judged_call_was_checked():
    timed = [torch.randn(64)]
    ev = evaluation(refuses, lambda: [torch.randn(65)])
    ev.strict_info["judged_calls_checked"] = 1  # strict timing's own judged calls compared
    checked_call(ev, timed, _layout(torch, timed))
    assert not failed(ev) and "timing_outputs" not in ev.checks.checks
    assert ev.strict_info["judged_calls_raised"] == 1


def test_a_reference_that_takes_the_values_is_checked_and_counted():
    timed = [torch.randn(64)]
    ev = evaluation(torch.relu, lambda: [torch.randn(64)])
    checked_call(ev, timed, _layout(torch, timed))
    assert not failed(ev) and ev.checks.checks["timing_outputs"]["passed"]
    assert ev.strict_info["judged_calls_checked"] == 1 and "reference_raised" not in ev.strict_info


@pytest.mark.parametrize(
    "error",
    [
        RecursionError("maximum recursion depth exceeded"),
        MemoryError(),
        UserWarning("made an error"),
        RuntimeError("CUDA out of memory. Tried to allocate 6.00 GiB"),
    ],
    ids=["recursion", "memory", "warning", "cuda_oom"],
)
def test_errors_of_the_process_state_fail_even_off_the_distribution(error):
    ev = evaluation(None, None)
    reference_refused(ev, error, "the strict trial 'huge'", drawn=False)
    assert failed(ev) == {"reference_ran"}
    assert "not of the values" in ev.checks.checks["reference_ran"]["detail"]


def test_a_value_error_off_the_distribution_is_recorded_and_no_check():
    ev = evaluation(None, None)
    reference_refused(
        ev, ValueError("matrix is not positive definite"), "the strict trial 'signed'", drawn=False
    )
    assert not ev.checks.checks
    assert ev.strict_info["reference_raised"] == [
        {"call": "the strict trial 'signed'", "error": "ValueError: matrix is not positive definite"}
    ]


def test_a_reference_out_of_device_memory_runs_once_more_after_the_cache_is_emptied(monkeypatch):
    from kb_agent.evaluator.stages.strict_trials import reference_call

    calls, emptied = [], []

    def reference(x):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return x * 2

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    ev = evaluation(reference, None)
    ev.device = torch.device("cuda")
    assert torch.equal(reference_call(ev, [torch.ones(2)]), torch.full((2,), 2.0)) and emptied == [1]
    ev.device = torch.device("cpu")  # no device cache to give back there
    calls.clear()
    with pytest.raises(torch.OutOfMemoryError):
        reference_call(ev, [torch.ones(2)])


def test_the_cpu_allocators_failure_is_out_of_memory_too():
    from kb_agent.evaluator.context import is_oom

    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)")  # fmt: skip
    assert is_oom(cpu) and is_oom(MemoryError()) and not is_oom(ValueError("matrix is singular"))


def test_a_resource_limit_changed_shows_in_the_interpreters_hooks():
    # helper-28 lowered the address space (resource.setrlimit) after a replayed call so that the
    # reference ran out of memory where the harness judged the call
    import resource

    from kb_agent.evaluator.strict import interpreter_hooks

    before = interpreter_hooks()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    try:
        assert interpreter_hooks()["resource limits"] != before["resource limits"]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert interpreter_hooks() == before
