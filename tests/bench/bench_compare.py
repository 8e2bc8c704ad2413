"""Seconds of one correctness comparison of a level-1-sized output, tier by tier.

    python tests/bench/bench_compare.py [--device cuda] [--shape 4096,393216] [--repeat 5]

The reference output is ReLU of a standard normal (KernelBench 1/19's output, 1.6e9 float32 elements by
default); the candidate outputs are, per case:

    pass_exact      a copy of the reference: `compare._identical_pass` decides
    pass_noise      the reference plus 1e-6 on every 7th element: `compare._margin_pass` decides
    pass_near       every element 0.75 of allclose's bound away: past the one-sweep shortcut, so
                    torch.allclose per chunk and the cheap statistics decide (`_passing_stats`)
    fail_one        one element off by 1.0: the full account with its diagnosis (`_chunked_stats`)
    relative_error  `strict.relative_error` of the pass_noise pair (strict trials take it per trial)

Prints one JSON line per case, `{"case": …, "median_s": …, "n": …, "passed": …}`: the median wall
seconds of `compare_outputs` (device synchronised before and after) over --repeat calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from kb_agent.evaluator.compare import compare_outputs, relative_error  # noqa: E402

ATOL = RTOL = 1e-2  # KernelBench's fp32 tolerances


def median_s(fn, repeat: int, sync) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", default="4096,393216")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator(device=device).manual_seed(0)
    expected = torch.randn(shape, device=device, generator=g).relu_()
    cases = {"pass_exact": expected.clone()}
    noisy = expected.clone()
    noisy.view(-1)[::7] += 1e-6
    cases["pass_noise"] = noisy
    cases["pass_near"] = expected + 0.75 * (ATOL + RTOL * expected.abs())
    cases["fail_one"] = expected.clone()
    cases["fail_one"].view(-1)[12345] += 1.0
    compare_outputs(expected[:8], noisy[:8], ATOL, RTOL, 0, 0)  # first-call costs out of the figures
    for case, actual in cases.items():
        call = lambda actual=actual: compare_outputs(expected, actual, ATOL, RTOL, 0, 0)  # noqa: E731
        s, r = median_s(call, args.repeat, sync)
        print(json.dumps({"case": case, "median_s": round(s, 4), "n": args.repeat, "passed": r.passed,
                          "max_abs_diff": r.max_abs_diff, "shape": list(shape)}), flush=True)  # fmt: skip
    s, rel = median_s(lambda: relative_error(expected, noisy), args.repeat, sync)
    line = {"case": "relative_error", "median_s": round(s, 4), "n": args.repeat, "value": rel}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
