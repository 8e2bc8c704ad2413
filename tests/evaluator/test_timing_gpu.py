"""Device timing on a real GPU (run on the H200 machine: `pytest -q -m gpu tests/evaluator`)."""

import pytest
import torch
from kb_agent.evaluator import timing

pytestmark = pytest.mark.gpu


def _host_read(x):
    return x * float(x.sum())  # `.item()` inside: no CUDA graph can hold it


def _host_read_past_the_debug_mode(x):
    torch.cuda.set_sync_debug_mode(0)  # a model that turns the sync check off reaches the capture itself
    return _host_read(x)


@pytest.mark.parametrize("fn", [_host_read, _host_read_past_the_debug_mode])
def test_a_model_that_cannot_be_captured_leaves_random_draws_working(fn):
    x = torch.randn(1024, device="cuda")
    assert timing._capture(fn, [x], 1e-4, 1e-4) is None
    torch.cuda.synchronize()
    # a failed capture must leave the default generator out of capture mode: the strict timing stage and
    # references with dropout draw from it next
    y = torch.rand(1 << 16, device="cuda")
    assert 0.4 < float(y.mean()) < 0.6
    assert torch.cuda.get_sync_debug_mode() == 0


def test_time_device_falls_back_to_eager_events_for_a_model_with_a_host_read():
    x = torch.randn(1 << 20, device="cuda")
    method, times = timing.time_device(
        {"reference": (torch.relu, [x]), "candidate": (_host_read, [x.clone()])},
        warmup=2, trials=5, flusher=timing.L2Flusher(x.device), atol=1e-4, rtol=1e-4,
    )  # fmt: skip
    assert method == "back_to_back_events"
    assert len(times["candidate"]) == 5 and all(t > 0 for t in times["candidate"])
    torch.rand(16, device="cuda")
