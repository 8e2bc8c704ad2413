"""The evaluator's own device memory beside a candidate's (run on the GPU machine: `pytest -q -m gpu`).

Found on an H100 (80 GB): strict mode's checks held so many copies of 1/19's 6 GiB input at once that
the custom-kernel probe ran an honest Triton ReLU out of memory (runtime_error), where KernelBench's own
evaluation needs about three such tensors. The trials' tensors now die before the probe, and the probe
takes its snapshots in host memory when the device has no room for them.
"""

from pathlib import Path

import pytest
import torch
from kb_agent.evaluator import EvalSettings, Status, evaluate
from kb_agent.evaluator import kernel_probe as kp
from kb_agent.problems import resolve_one

pytestmark = pytest.mark.gpu
CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
ELEMENTS = 1 << 28  # 1 GiB of float32 per tensor

RELU_PROBLEM = f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, {ELEMENTS // 16})]


def get_init_inputs():
    return []
"""


def test_a_strict_evaluation_holds_a_few_copies_of_the_inputs_at_most(tmp_path):
    problem = tmp_path / "relu_1gib.py"
    problem.write_text(RELU_PROBLEM)
    r = evaluate(resolve_one(str(problem)), (CANDIDATES / "triton_relu.py").read_text(), EvalSettings())
    assert r.status == Status.CORRECT, r.message
    peak = r.strict["peak_device_bytes"]
    copies = peak / (ELEMENTS * 4)
    print(f"\npeak device memory of a strict evaluation: {peak / 2**30:.2f} GiB, {copies:.1f} x the input")
    # inputs, their clones for reference and candidate, both outputs, the probe's snapshots and masks, the
    # timing's captured graphs: 8.0 on an H100 (2026-12-06); before the fix the probe alone met twelve
    assert copies <= 8.5


def test_snapshots_in_host_memory_tell_the_same_launches_apart(monkeypatch):
    def relu_into(x, y):
        y.copy_(torch.relu(x))

    def copy_into(x, y):
        y.copy_(x)

    x = torch.randn(1 << 20, device="cuda")
    facts = {}
    for where, reserve in (("device", kp.SNAPSHOT_RESERVE_BYTES), ("host", 1 << 62)):
        monkeypatch.setattr(kp, "SNAPSHOT_RESERVE_BYTES", reserve)
        assert kp.snapshot(torch, [x])[0].device.type == ("cuda" if where == "device" else "cpu")
        probe = kp.KernelProbe(torch)
        relu, copy = (kp._wrapped(probe, f"ext.{f.__name__}", f) for f in (relu_into, copy_into))
        y, z = torch.empty_like(x), torch.zeros_like(x)
        with probe.passing("observe") as seen:
            relu(x, y)
            copy(torch.relu(x), z)
        with probe.passing("poison") as poisoned:  # on values the observe pass did not see (its rule)
            relu(torch.randn_like(x), y)
        assert torch.isnan(y).all()
        facts[where] = ([(launch.wrote, launch.copy) for launch in seen.launches],
                        [launch.poisoned for launch in poisoned.launches])  # fmt: skip
    assert facts["host"] == facts["device"] == ([(1, False), (1, True)], [1])
