"""strict_trials.poison_free_memory: every free block of the caching allocator taken by an allocation of
its own size and filled with NaN; the evaluator's own poisoning never ends an evaluation. (A fake torch
stands in for the CUDA allocator here; the GPU red-team candidates `stale_*` test the effect on a GPU.)"""

from types import SimpleNamespace

from kb_agent.evaluator.stages.strict_trials import poison_free_memory


class OOM(Exception):
    pass


class FakeTensor:
    def __init__(self, n):
        self.n, self.filled = n, None

    def fill_(self, v):
        self.filled = v


def fake_ev(snapshot, fail_above=None, snapshot_raises=False):
    made = []

    def empty(n, dtype=None, device=None):
        if fail_above is not None and n * 4 > fail_above:
            raise OOM("CUDA out of memory")
        made.append(FakeTensor(n))
        return made[-1]

    def memory_snapshot():
        if snapshot_raises:
            raise RuntimeError("no snapshot")
        return snapshot

    cuda = SimpleNamespace(memory_snapshot=memory_snapshot, current_device=lambda: 0,
                           memory_reserved=lambda d: 10_000, memory_allocated=lambda d: 2_000)  # fmt: skip
    torch = SimpleNamespace(cuda=cuda, empty=empty, float32="f32", OutOfMemoryError=OOM)
    ev = SimpleNamespace(torch=torch, device=SimpleNamespace(type="cuda", index=0), strict_info={},
                         sync=lambda: None)  # fmt: skip
    return ev, made


def seg(device, *blocks):
    return {"device": device, "blocks": [{"size": s, "state": st} for s, st in blocks]}


def test_each_free_block_of_this_device_is_filled_largest_first():
    snapshot = [seg(0, (4096, "inactive"), (1024, "active_allocated"), (512, "inactive")),
                seg(0, (1 << 20, "inactive")), seg(1, (8192, "inactive"))]  # fmt: skip
    ev, made = fake_ev(snapshot)
    poison_free_memory(ev)
    assert [t.n * 4 for t in made] == [1 << 20, 4096, 512]  # not the other device's, not the live block
    assert all(t.filled != t.filled for t in made)  # NaN
    assert "poison_skipped_bytes" not in ev.strict_info


def test_a_block_that_cannot_be_taken_is_recorded_not_raised():
    ev, made = fake_ev([seg(0, (8 << 30, "inactive"), (4096, "inactive"))], fail_above=1 << 30)
    poison_free_memory(ev)
    assert [t.n * 4 for t in made] == [4096]
    assert ev.strict_info["poison_skipped_bytes"] == 8 << 30


def test_without_a_snapshot_the_free_total_is_poisoned_as_one_allocation():
    ev, made = fake_ev([], snapshot_raises=True)
    poison_free_memory(ev)
    assert [t.n * 4 for t in made] == [8_000]


def test_a_snapshot_naming_no_free_block_falls_back_to_the_free_total():
    ev, made = fake_ev([{"blocks": [{"size": 4096, "state": "inactive"}]}])  # no "device" key
    poison_free_memory(ev)
    assert [t.n * 4 for t in made] == [8_000]


def test_nothing_to_do_on_the_cpu():
    ev, made = fake_ev([seg(0, (4096, "inactive"))])
    ev.device = SimpleNamespace(type="cpu", index=None)
    poison_free_memory(ev)
    assert made == []
