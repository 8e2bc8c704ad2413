"""What an evaluation asks of the pool between its two phases: a build slot, then a run slot.

    with slots.build() as slot:     # a CPU build slot: the build child runs on `slot.cores`
        ...
    with slots.run() as slot:       # the run slot (one GPU's): correctness and timing on `slot.device`
        ...

`evaluator.runner.evaluate` takes the slots in that order and holds each only while its child runs, so
a job holds no slot while it waits for the next. `EvalPool` hands out its own (`evaluator.pool`);
without a pool (`Unpooled`) both are free at once, the run slot on the settings' device. Also here: how
the pool divides the process's CPUs between the GPUs' run slots and the builds (`partition_cores`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Slot:
    """A slot an evaluation's child runs in.

    Attributes:
        device: the device its job is evaluated on ("cuda:0", "cpu"); "cpu" for a build slot.
        cores: the CPUs its child is pinned to (`os.sched_setaffinity`, set by the child itself before
            it imports torch, so every thread and compiler it starts inherits them); None leaves the
            child's CPUs as they are.
    """

    device: str
    cores: tuple[int, ...] | None = None


class Slots(Protocol):
    """The slots of one job: `build()` for the build child, then `run()` for the run child; each a
    context manager that waits for its slot, yields it, and frees it on the way out (an exception too)."""

    def build(self) -> ContextManager[Slot]: ...

    def run(self) -> ContextManager[Slot]: ...


@contextlib.contextmanager
def taken(slot: ContextManager[Slot], waits: dict[str, float], name: str) -> Iterator[Slot]:
    """Enter `slot`, adding the seconds it took (waiting for it) to `waits[name]` ("build_wait",
    "run_wait": what an evaluation's result records of a pool's slots)."""
    t0 = time.perf_counter()
    with slot as held:
        waits[name] = waits.get(name, 0.0) + time.perf_counter() - t0
        yield held


class Unpooled:
    """The slots of an evaluation without a pool: nothing to wait for; the run slot is `device`."""

    def __init__(self, device: str):
        self.device = device

    @contextlib.contextmanager
    def build(self) -> Iterator[Slot]:
        yield Slot("cpu")

    @contextlib.contextmanager
    def run(self) -> Iterator[Slot]:
        yield Slot(self.device)


def _sibling_groups(cpus: Sequence[int]) -> list[tuple[int, ...]]:
    """`cpus` grouped by physical core (hyperthread siblings together, from
    /sys/devices/system/cpu/cpuN/topology/thread_siblings_list), in the order of each group's first CPU;
    each CPU alone where the topology cannot be read."""
    allowed, seen, groups = set(cpus), set(), []
    for cpu in sorted(cpus):
        if cpu in seen:
            continue
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
            siblings = set()
            for part in text.strip().split(","):
                lo, _, hi = part.partition("-")
                siblings.update(range(int(lo), int(hi or lo) + 1))
        except (OSError, ValueError):
            siblings = {cpu}
        group = tuple(sorted((siblings & allowed) - seen)) or (cpu,)
        seen.update(group)
        groups.append(group)
    return groups


def default_gpu_cores(cpus: int, gpus: int) -> int:
    """CPUs pinned to each GPU's run slot when the pool is not told: 2 when the process has at least
    2 per GPU plus 2 for the builds, else 1 when it has one per GPU plus one, else 0 (too few to keep
    apart: nothing is pinned). Two, because a run child needs one for the thread that launches and times
    kernels and one for everything else it runs (torch's and the CUDA driver's helper threads, the
    reference's CPU work, the collector), so the timing thread is not descheduled; a third would sit
    idle in a single-stream timing loop."""
    if cpus >= 2 * gpus + 2:
        return 2
    return 1 if cpus >= gpus + 1 else 0


def partition_cores(
    cpus: Sequence[int], gpus: int, per_gpu: int
) -> tuple[list[tuple[int, ...] | None], tuple[int, ...] | None]:
    """Divide `cpus` between `gpus` run slots (`per_gpu` CPUs each, taken from the highest-numbered
    physical cores, whole cores with their hyperthread siblings, so no build shares a core with a timing
    child) and the builds (the rest).

    Returns (the CPUs of each GPU's run slot, the CPUs of the build slots); all None (nothing pinned)
    when `per_gpu` is 0, there is no GPU, or the GPUs would take every CPU."""
    if per_gpu < 1 or gpus < 1:
        return [None] * gpus, None
    groups = _sibling_groups(cpus)
    taken: list[tuple[int, ...]] = []
    for _ in range(gpus):
        mine: list[int] = []
        while len(mine) < per_gpu and groups:
            mine.extend(groups.pop())
        taken.append(tuple(sorted(mine)))
    rest = tuple(sorted(c for g in groups for c in g))
    if not rest or any(not t for t in taken):
        return [None] * gpus, None
    return list(taken), rest


__all__ = ["Slot", "Slots", "Unpooled", "default_gpu_cores", "partition_cores"]
