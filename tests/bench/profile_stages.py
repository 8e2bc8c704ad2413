"""Where an evaluation's seconds go, function by function: one evaluation run in this process (no child,
no sandbox) under cProfile, each stage timed, then the functions with the most cumulative seconds.

    KB_DATASET=... python tests/bench/profile_stages.py [--problem 1/19] [--candidate FILE] [--top 40]
        [--repeat 2] [--profile-run 1] [--device cuda] [--no-strict] [--build-dir DIR]
        [--part MODULE:ATTR ...]

The candidate defaults to the Triton ReLU of tests/bench/repro_kernels/ (no extension build, so the
figures are the evaluator's own stages); `--candidate cuda:relu` is bench_latency's CUDA candidate
for that kernel (`bench_latency.KERNELS`). As in a child forked from the warm worker, the modules of
`evaluator.zygote.PRELOAD` are imported, its caches warmed and its objects frozen (`gc.freeze`) before
the clock starts (`--cold-imports`: not) and the
evaluation sees the child's environment (`runner.child_env`: its HOME, TMPDIR, Triton cache). `--repeat 2` evaluates it twice in the same process;
`--profile-run` picks the one profiled: the first (the default) is what every evaluation costs, since
each runs in a fresh child; the second is a warm one, first-call initialisation aside. A developer's
tool: an evaluation here runs the candidate unisolated, so point it only at candidates you trust.

`--build-dir` keeps the candidate's builds there: a second invocation with the same folder profiles
an identical source again (its extension and Triton cache built, the process fresh).

Prints, per evaluation, `{"stage_s": {stage: seconds}, "parts_s": {function: [calls, seconds]}}` as
one JSON line, then the profile's top functions by cumulative seconds (pstats' own table). `parts_s`
times the evaluator's named steps (`PARTS`) by the wall clock, which holds where cProfile does not:
torch's profiler (the stream census, the profile of the forward) takes Python's profiling hook over,
and cProfile sees nothing of the evaluation after its first use. `--part MODULE:ATTR` (repeatable; e.g.
kb_agent.evaluator.compare:_passing_stats) times one more function so.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from kb_agent.evaluator import EvalSettings  # noqa: E402
from kb_agent.evaluator.context import Evaluation  # noqa: E402
from kb_agent.evaluator.runner import candidate_job, child_env  # noqa: E402
from kb_agent.evaluator.zygote import PRELOAD, warm_caches  # noqa: E402
from kb_agent.problems import resolve_one  # noqa: E402

DEFAULT_CANDIDATE = ROOT / "tests" / "bench" / "repro_kernels" / "l1_p19_relu.py"


PARTS = (
    "kb_agent.evaluator.compare:compare_outputs",
    "kb_agent.evaluator.timing:time_parity",
    "kb_agent.evaluator.timing:time_device",
    "kb_agent.evaluator.timing:time_repro",
    "kb_agent.evaluator.timing:time_strict",
    "kb_agent.evaluator.timing:stream_census",
    "kb_agent.evaluator.timing:_capture",
    "kb_agent.evaluator.profile:profile_forward",
    "kb_agent.evaluator.stages.strict_trials:run",
    "kb_agent.evaluator.stages.strict_trials:check_custom_kernels",
    "kb_agent.evaluator.stages.strict_trials:poison_free_memory",
    "kb_agent.evaluator.stages.timing:strict_timing",
    "kb_agent.evaluator.context:Evaluation.draw_inputs",
)


def time_parts(parts_s: dict, parts: tuple[str, ...] = PARTS) -> None:
    """Wrap each of `parts` ("module:attr", attr dotted for a method) so that its calls and wall seconds
    add up in `parts_s`."""
    import functools
    import importlib

    for spec in parts:
        module_name, attr = spec.split(":")
        owner = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for step in path:
            owner = getattr(owner, step)
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*a, _fn=fn, _key=f"{module_name.rsplit('.', 1)[-1]}:{attr}", **kw):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **kw)
            finally:
                calls, seconds = parts_s.get(_key, (0, 0.0))
                parts_s[_key] = (calls + 1, round(seconds + time.perf_counter() - t0, 4))

        setattr(owner, name, timed)


class StageClock:
    """A result channel that keeps what the stages send and the seconds between stage changes."""

    def __init__(self):
        self.events: list[dict] = []
        self.stage_s: dict[str, float] = {}
        self._stage, self._t = None, time.perf_counter()

    def send(self, event: str, **payload) -> None:
        now = time.perf_counter()
        if event in ("stage", "done"):
            if self._stage:
                self.stage_s[self._stage] = round(self.stage_s.get(self._stage, 0.0) + now - self._t, 4)
            self._stage, self._t = payload.get("name"), now
        self.events.append({"event": event, **payload})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="1/19")
    ap.add_argument("--candidate", default=str(DEFAULT_CANDIDATE))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--profile-run", type=int, default=1)
    ap.add_argument("--no-strict", action="store_true")
    ap.add_argument("--cold-imports", action="store_true")
    ap.add_argument("--build-dir", type=Path)
    ap.add_argument("--part", action="append", default=[], help="one more function to time, module:attr")
    args = ap.parse_args()
    problem = resolve_one(args.problem)
    settings = EvalSettings(device=args.device, strict=not args.no_strict, sandbox=False, fork_server=False)
    if args.candidate.startswith("cuda:"):
        import bench_latency

        name = args.candidate.removeprefix("cuda:")
        source = bench_latency.cuda_candidate(name, bench_latency.KERNELS[name])
    else:
        source = Path(args.candidate).read_text()
    with tempfile.TemporaryDirectory() as tmp:
        workdir, build_root = Path(tmp) / "work", (args.build_dir or Path(tmp) / "build").resolve()
        workdir.mkdir()
        build_root.mkdir(parents=True, exist_ok=True)
        job = candidate_job(problem, source, settings, workdir, build_root)
        os.environ.update(child_env(settings, workdir, build_root))
        tempfile.tempdir = None  # the child's TMPDIR, as a child's tempfile would find it
        if not args.cold_imports:  # as the warm worker leaves a forked child (`zygote._serve`)
            for name in PRELOAD:
                __import__(name)
            warm_caches()
            gc.collect()
            gc.freeze()
        job["sandbox"] = None
        prof = cProfile.Profile()
        parts_s: dict = {}
        time_parts(parts_s, PARTS + tuple(args.part))
        for i in range(args.repeat):
            clock = StageClock()
            parts_s.clear()
            profiled = cProfile.Profile() if i + 1 == args.profile_run else None
            t0 = time.perf_counter()
            if profiled:
                profiled.enable()
            Evaluation(job, clock).run()
            if profiled:
                profiled.disable()
                prof = profiled
            done = next((e for e in clock.events if e["event"] == "done"), {})
            print(json.dumps({"run": i + 1, "status": done.get("status"), "message": done.get("message", "")[:600],
                              "wall_s": round(time.perf_counter() - t0, 3), "stage_s": clock.stage_s, "parts_s": parts_s}), flush=True)  # fmt: skip
        stats = pstats.Stats(prof, stream=sys.stdout)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
