"""`agent.checks.check_problems`, the library behind `kb-agent problems check`, with a fake check
function (the real one, a child per problem, is covered by tests/evaluator and test_interrupt)."""

import threading
import time

import pytest
from kb_agent.agent.checks import check_problems, ran_out_of_memory
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import resolve

TOY = resolve("toy")
SETTINGS = EvalSettings(device="cpu")


def result(p, status="ok", message=""):
    return {"key": p.key, "status": status, "message": message, "flags": [], "seconds": 0.0}


class Recorder:
    """A store that records what it is asked to record."""

    def __init__(self):
        self.recorded = []

    def record_problem_check(self, c):
        self.recorded.append(c["key"])


class OutOfMemoryBesideOthers:
    """Fails the first check of problem `victim` with out of memory, as a GPU shared with other checks
    would; a check takes 50 ms, so `jobs` of them overlap."""

    def __init__(self, victim):
        self.victim, self.calls, self.lock = victim, [], threading.Lock()

    def __call__(self, p, settings):
        with self.lock:
            self.calls.append(p.key)
            first = self.calls.count(p.key) == 1
        time.sleep(0.05)
        if p.key == self.victim and first:
            return result(p, "error", "out of memory on cuda:0 beside the other checks")
        return result(p, "flagged" if p.key == TOY[0].key else "ok")


def test_results_come_back_in_order_and_findings_are_stored():
    store, seen = Recorder(), []
    check = OutOfMemoryBesideOthers(victim=None)
    out = check_problems(
        TOY, SETTINGS, jobs=2, store=store, on_result=lambda p, c: seen.append(p.key), check=check
    )
    assert [c["key"] for c in out] == [p.key for p in TOY]
    assert seen == [p.key for p in TOY] and sorted(store.recorded) == sorted(p.key for p in TOY)


def test_out_of_memory_beside_others_is_checked_again_alone_at_the_end():
    victim = TOY[1].key
    store, seen = Recorder(), []
    check = OutOfMemoryBesideOthers(victim)
    out = check_problems(
        TOY, SETTINGS, jobs=3, store=store, on_result=lambda p, c: seen.append(p.key), check=check
    )
    assert check.calls.count(victim) == 2 and check.calls[-1] == victim  # again, after all the others
    assert [c["status"] for c in out][1] == "ok"  # the second result replaced the first
    assert seen[-1] == victim and seen.count(victim) == 1  # reported once, when final
    assert store.recorded.count(victim) == 1


def test_alone_an_out_of_memory_is_unchecked_for_memory_and_stored():
    victim = TOY[1].key
    store = Recorder()
    check = OutOfMemoryBesideOthers(victim)
    out = check_problems(TOY, SETTINGS, jobs=1, store=store, check=check)
    assert check.calls.count(victim) == 1 and not ran_out_of_memory(out[1])
    assert out[1]["status"] == "unchecked" and out[1]["unchecked"]["reason"] == "memory"
    # stored as the reason (the store keeps a finding of the same source over it: test_problem_check)
    assert victim in store.recorded


def test_jobs_below_one_is_refused():
    with pytest.raises(ValueError, match="jobs must be 1 or more"):
        check_problems(TOY, SETTINGS, jobs=0, check=OutOfMemoryBesideOthers(None))


def test_checks_go_through_the_pool_spread_over_the_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    devices, lock, now, most = [], threading.Lock(), [0], [0]

    def check(p, settings):
        with lock:
            devices.append(settings.device)
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        return result(p)

    out = check_problems(TOY, EvalSettings(device="cuda"), jobs=4, check=check)
    assert [c["status"] for c in out] == ["ok"] * len(TOY)
    assert set(devices) == {"cuda:0", "cuda:1"} and most[0] <= 4  # each check on one GPU; 4 at once at most


def test_the_check_pool_has_jobs_cpu_slots_or_shares_the_gpus():
    check = OutOfMemoryBesideOthers(None)
    from kb_agent.agent.checks import check_pool

    assert check_pool(SETTINGS, 3, check).size == 3
    named = check_pool(EvalSettings(device="cuda:1"), 3, check)
    assert named.size == 3 and {s.device for s in named.slots()} == {"cuda:1"}
