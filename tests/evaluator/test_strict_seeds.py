"""Strict mode seeds the RNGs before every call of either model, as KernelBench's correctness trials do
(`set_seed(trial_seed)` before each), so a reference that draws random numbers (dropout in training mode)
meets the same draws in a candidate that makes them alike (CPU, Triton interpreted)."""

import importlib.util
from pathlib import Path

import pytest
from kb_agent.evaluator import Status

# the problem and candidate helpers of the timing stage's tests (the Triton ReLU kernel among them)
_spec = importlib.util.spec_from_file_location(
    "timing_inputs", Path(__file__).with_name("test_timing_inputs.py")
)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
problem, run = _helpers.problem, _helpers.run

DROPOUT_REFERENCE = "torch.nn.functional.dropout(torch.relu(x), p=0.2, training=True)"


DROPOUT_RELU = """
def forward(self, x):
    return torch.nn.functional.dropout(relu_into(x.contiguous(), torch.empty_like(x)), p=0.2, training=True)
"""


@pytest.mark.slow
def test_a_candidate_of_a_reference_that_draws_random_numbers_passes_when_it_draws_them_alike(tmp_path):
    # KernelBench seeds the RNGs before each model's call, so dropout in training mode draws the same mask
    # in both; strict mode's extra trials and judged calls did not, and rejected this honest candidate
    # (trial_candidate_first, relative_error, timing_outputs: found on KernelBench 2/66)
    r = run(problem(tmp_path, "return [torch.randn(16, 1024)]", forward=DROPOUT_REFERENCE), DROPOUT_RELU)
    assert r.status == Status.CORRECT, r.message


DEAD_KERNEL_DROPOUT = """
def forward(self, x):
    x = x.contiguous()
    relu_into(x, torch.empty_like(x))  # launched, its result never used
    return torch.nn.functional.dropout(torch.where(x > 0, x, 0.0), p=0.2, training=True)
"""


@pytest.mark.slow
def test_a_dead_kernel_beside_dropout_is_found_by_the_kernel_probe(tmp_path):
    # the probe's poisoned call and the reference's drew different dropout masks, so the output always
    # "changed" when the custom launch's results were poisoned, and a kernel whose result is never used
    # passed as doing the work (correct before the probe seeded both calls alike)
    r = run(
        problem(tmp_path, "return [torch.randn(16, 1024)]", forward=DROPOUT_REFERENCE), DEAD_KERNEL_DROPOUT
    )
    assert r.status == Status.REJECTED, r.message
    failed = {k for k, v in r.strict["checks"].items() if not v["passed"]}
    assert failed == {"custom_kernels_do_the_work"}, failed
    assert r.strict["kernel_probe"]["poison"]["output_unchanged"] is True
