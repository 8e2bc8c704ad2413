"""What Nsight Compute's part of the feedback looks like for a few real kernels, its size and its cost
(issue 15's proof). Run on the GPU machine:

    KB_DATASET=... python tests/bench/bench_ncu.py [--kernels cuda_relu,l1_p23_softmax,l2_p40_matmul_scale_residual]
        [--ncu-s 120] [--json OUT.json]

Each kernel is evaluated once with `EvalSettings(ncu=True)` (strict mode, KernelBench's settings): the
evaluation, then Nsight Compute's pass in a child of its own. Prints per kernel the verdict, the pass's
status and wall seconds beside the whole evaluation's, the `ncu` and `speed_of_light` components as the
model reads them, and their size in characters and tokens (tiktoken's cl100k_base where it is
installed, else characters / 4, marked "~"). A JSON line per kernel goes to stdout's end and --json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# name -> (candidate file, KernelBench problem)
KERNELS = {
    "cuda_relu": (ROOT / "tests/candidates/cuda_relu.py", "1/19"),
    "triton_relu": (ROOT / "tests/candidates/triton_relu.py", "1/19"),
    "l1_p23_softmax": (ROOT / "tests/bench/repro_kernels/l1_p23_softmax.py", "1/23"),
    "l1_p26_gelu_cuda": (ROOT / "tests/bench/repro_kernels/l1_p26_gelu_cuda.py", "1/26"),
    "l2_p40_matmul_scale_residual": (
        ROOT / "tests/bench/repro_kernels/l2_p40_matmul_scale_residual.py",
        "2/40",
    ),
}
DEFAULT = "cuda_relu,l1_p23_softmax,l2_p40_matmul_scale_residual"


_ENCODER: list = []  # [encoder or None], tried once


def tokens(text: str) -> tuple[int, bool]:
    """(token count, exact): tiktoken's cl100k_base where it is installed with its encoding at hand (tried
    once: without one it would download it), else len / 4."""
    if not _ENCODER:
        try:
            import tiktoken

            _ENCODER.append(tiktoken.get_encoding("cl100k_base"))
        except Exception:  # noqa: BLE001 - not installed, or its encoding file cannot be had offline
            _ENCODER.append(None)
    if _ENCODER[0] is None:
        return round(len(text) / 4), False
    return len(_ENCODER[0].encode(text)), True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=DEFAULT, help=f"comma list of {', '.join(KERNELS)}")
    ap.add_argument("--ncu-s", type=float, default=120.0, help="EvalSettings.ncu_s")
    ap.add_argument("--json", type=Path, help="write the JSON lines here too")
    args = ap.parse_args(argv)
    from kb_agent.agent.feedback import feedback_for, ncu_summary, speed_of_light
    from kb_agent.evaluator import EvalSettings, evaluate
    from kb_agent.problems import resolve_one

    lines = []
    for name in args.kernels.split(","):
        path, problem = KERNELS[name]
        r = evaluate(resolve_one(problem), path.read_text(), EvalSettings(ncu=True, ncu_s=args.ncu_s))
        part = "\n\n".join(p for p in (ncu_summary(r.ncu), speed_of_light(r.ncu)) if p)
        n_tok, exact = tokens(part)
        full = feedback_for(r, recipe="full")
        full_tok, _ = tokens(full)
        ncu_s = r.stages.get("ncu")
        print(f"=== {name} on {problem}: {r.status}, speedup {r.speedup}; ncu {r.ncu.status if r.ncu else None} "
              f"in {ncu_s if ncu_s is None else round(ncu_s, 1)} s (evaluation in all {r.stages.get('total', 0):.1f} s)")  # fmt: skip
        print(part)
        if r.ncu and r.ncu.detail:
            print(f"(detail, for people: {r.ncu.detail})")
        print(f"--- the ncu part: {len(part)} characters, {'' if exact else '~'}{n_tok} tokens; the whole "
              f"feedback (recipe full): {len(full)} characters, {'' if exact else '~'}{full_tok} tokens\n")  # fmt: skip
        lines.append({"kernel": name, "problem": problem, "status": str(r.status), "speedup": r.speedup,
                      "ncu_status": r.ncu.status if r.ncu else None, "ncu_message": r.ncu.message if r.ncu else None,
                      "ncu_s": ncu_s, "total_s": r.stages.get("total"), "part_chars": len(part),
                      "part_tokens": n_tok, "tokens_exact": exact, "full_chars": len(full), "full_tokens": full_tok,
                      "ncu": r.to_dict()["ncu"]})  # fmt: skip
    for line in lines:
        print(json.dumps(line))
    if args.json:
        args.json.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
