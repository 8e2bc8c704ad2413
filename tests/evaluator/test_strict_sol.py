"""Strict mode's speed-of-light floor (issue 11, item 2): unique bytes, and a floor of the problem that
is never applied where the reference itself beats it, nor built from the reference's FLOPs."""

import pytest
import torch
from kb_agent.evaluator.strict import count_bytes, judge_speed_of_light, speed_of_light


def test_plain_tensors_count_their_bytes():
    a, b = torch.ones(4, 8), torch.ones(16, dtype=torch.float16)
    assert count_bytes([a, b]) == 4 * 8 * 4 + 16 * 2


def test_an_expanded_input_counts_its_storage_not_its_logical_size():
    x = torch.ones(1).expand(1 << 20)  # 4 MiB logically, 4 bytes of memory
    assert count_bytes([x]) == 4
    row = torch.ones(1, 1024).expand(4096, 1024)
    assert count_bytes([row]) == 1024 * 4


def test_an_output_aliasing_an_input_counts_once():
    x = torch.ones(256, 256)
    assert count_bytes([x], x) == x.numel() * 4
    assert count_bytes([x], x.view(-1)) == x.numel() * 4  # a view of the same storage
    assert count_bytes([x, x]) == x.numel() * 4


def test_a_slice_counts_what_it_spans_not_the_whole_storage():
    big = torch.ones(1000, 1000)
    assert count_bytes([big[:10]]) == 10 * 1000 * 4
    # two disjoint slices of one storage: both, never more than the storage
    assert count_bytes([big[:10], big[10:20]]) == 20 * 1000 * 4
    assert count_bytes([big, big[:10]]) == big.numel() * 4


def test_nested_outputs_are_counted():
    assert count_bytes((torch.ones(3), [torch.ones(5)])) == 32


def _sol(floor_bytes=8e9, flops=0, bw=4e12):
    return speed_of_light(int(floor_bytes), flops, bw, "9.0", "fp32")


def test_floor_is_bytes_over_bandwidth_and_flops_are_only_recorded():
    sol = _sol(flops=int(2 * 4096**3))
    assert sol["floor_ms"] == pytest.approx(2.0)
    assert sol["flops_ms"] == pytest.approx(2 * 4096**3 / 495e12 * 1e3)


def test_a_candidate_slower_than_the_floor_passes():
    assert judge_speed_of_light(_sol(), candidate_ms=2.5, reference_ms=3.0) == (True, "")


def test_a_candidate_far_under_the_floor_is_rejected():
    sol = _sol()
    passed, detail = judge_speed_of_light(sol, candidate_ms=0.5, reference_ms=3.0)
    assert not passed and "faster than physically possible" in detail and "8000000000 unique bytes" in detail
    assert sol["fraction"] == pytest.approx(4.0)


def test_a_floor_the_reference_beats_is_recorded_as_wrong_and_not_applied():
    # the case: 0.9884 ms against a 2.0169 ms floor, while the reference ran in 0.83 ms
    sol = speed_of_light(8589934596, 0, 8589934596 / 2.0169e-3, "9.0", "fp32")
    passed, detail = judge_speed_of_light(sol, candidate_ms=0.9884, reference_ms=0.83)
    assert passed and detail == ""
    assert "not applied" in sol["floor_invalid"]


def test_beating_the_reference_flops_is_a_warning_never_a_rejection():
    # diag(A) @ B with N = M = 4096 rewritten as a broadcast multiply: 137 GFLOP of matmul in the
    # reference (0.28 ms at the peak rate), 128 MiB to move (0.03 ms)
    n = 4096
    sol = speed_of_light(n * 4 + 2 * n * n * 4, 2 * n**3, 4e12, "9.0", "fp32")
    passed, _ = judge_speed_of_light(sol, candidate_ms=0.05, reference_ms=0.6)
    assert passed
    assert "flops_warning" in sol and "floor_invalid" not in sol


def test_alternative_inputs_reach_exp_overflow_in_fp32_only():
    from kb_agent.evaluator.strict import alternative_inputs

    x, idx = torch.randn(4, 8), torch.arange(4)
    fp32 = dict(alternative_inputs([x, idx], torch, "fp32"))
    assert list(fp32) == ["signed", "larger", "huge"]
    assert torch.equal(fp32["huge"][0], x * 100) and fp32["huge"][1] is idx
    assert torch.isinf(torch.exp(fp32["huge"][0])).any()  # where a softmax without its max overflows
    assert torch.isfinite(torch.softmax(fp32["huge"][0], dim=-1)).all()  # and the reference does not
    assert list(dict(alternative_inputs([x.half()], torch, "fp16"))) == ["signed", "larger"]


def test_the_signed_trial_keeps_the_draws_exact_zeros():
    # KernelBench 1/14 draws torch.triu(torch.rand(N, N)): a kernel that skips the zero blocks is honest
    # there, and 2x - mean(x) filled the lower triangle with -mean (helper-26)
    from kb_agent.evaluator.strict import alternative_inputs

    a = torch.triu(torch.rand(6, 6))
    signed = dict(alternative_inputs([a], torch))["signed"][0]
    assert torch.equal(signed, torch.triu(signed)) and (signed < 0).any()
    nonzero = a != 0
    assert torch.allclose(signed[nonzero], (2 * a - a.mean())[nonzero])
    x = torch.randn(100)  # a continuous draw: every element moves
    assert torch.allclose(dict(alternative_inputs([x], torch))["signed"][0], 2 * x - x.mean())
    assert torch.equal(
        dict(alternative_inputs([torch.tensor([0.5])], torch))["signed"][0], torch.tensor([-0.5])
    )


def test_a_trial_whose_output_overflows_says_how_many_elements_are_not_finite():
    # a NaN-filled output read "max abs diff 1.19e-07, relative error inf" (helper-26)
    from kb_agent.evaluator.compare import compare_outputs
    from kb_agent.evaluator.stages.strict_trials import _nonfinite

    x = torch.rand(64) * 100
    e2x = torch.exp(2 * x)
    textbook = (e2x - 1) / (e2x + 1)  # inf / inf past x = 44
    r = compare_outputs(torch.tanh(x), textbook, 1e-4, 1e-4, trial=-1, seed=0)
    assert not r.passed
    bad = int(torch.isnan(textbook).sum())
    assert bad and _nonfinite(r) == f", {bad} NaN and 0 infinite output elements where the reference has 0"
    assert (
        _nonfinite(compare_outputs(x, x + 1, 1e-4, 1e-4, trial=-1, seed=0)) == "" and _nonfinite(None) == ""
    )


def test_two_valued_inputs_are_kept_as_drawn_in_every_extra_trial():
    # helper-32: KernelBench 1/100 (HingeLoss) draws its targets as randint(0, 2) * 2 - 1, and an exact
    # kernel reading them as signs was rejected on rescaled targets; a 0/1 mask is structure too
    from kb_agent.evaluator.strict import _two_valued, alternative_inputs

    predictions = torch.randn(64)
    targets = torch.randint(0, 2, (64,)).float() * 2 - 1
    mask = (torch.rand(5000) > 0.5).float()
    for name, (p, t, m) in alternative_inputs([predictions, targets, mask], torch):
        assert t is targets and m is mask, name
        assert not torch.equal(p, predictions), name
    assert _two_valued(torch.ones(8)) and not _two_valued(torch.tensor([1.0]))
    late = torch.ones(10_000)
    late[-1] = 3.0  # a third value past the first elements: read chunk by chunk
    late[0] = -1.0
    assert not _two_valued(late) and not _two_valued(torch.randn(100))
