"""Seconds of one extension build by each path of the binding-object cache (evaluator.bindcache), beside
torch's stock `load_inline` build of the same sources, in one fresh cache:

    python tests/bench/bench_bindcache.py [--cuda] [--pch] [--repeat N] [--json OUT.json]

Builds in this process through `LoadInlineWrapper` (no evaluation child, no sandbox), each into a new
build folder:

    stock           torch's load_inline as it is (use_pch=False), a new folder
    own_binding     the wrapper, the cache empty for these declarations: main.cpp and the rest compiled
    publish         the harness compiling the request for the cache (its sandboxed process; no PCH)
    cached_binding  the wrapper again, the same main.cpp (for --cuda another .cu): the object linked
    pch_build       (--pch) the publisher precompiling torch/extension.h for these flags (once)
    own_with_pch    (--pch) new declarations, main.cpp compiled against that header
    gxx_main_cpp    (--pch) main.cpp alone, g++ by hand with the build's flags, without and with the header

Without --cuda the extension is C++ only (a CPU torch builds it). One JSON line per row: {"case",
"median_s", "all_s", "path"}. On a CPU machine of 2 cores that others share, the figures move by
tens of percent with their load.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import bindcache  # noqa: E402
from kb_agent.evaluator.build import LoadInlineWrapper  # noqa: E402

CPP = "torch::Tensor add_k(torch::Tensor x) {{ return x + {k}; }}"
DECL = "torch::Tensor add_k(torch::Tensor x);"
CU = r"""
__global__ void add_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + {k}.f;
}}
torch::Tensor add_k(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int n = x.numel();
    add_kernel<<<(n + {block} - 1) / {block}, {block}>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda", action="store_true", help="a CUDA extension (needs a CUDA torch and nvcc)")
    ap.add_argument("--pch", action="store_true", help="also the precompiled header's rows (about 0.8 GB)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    import torch.utils.cpp_extension as ce

    original = ce.load_inline
    work = Path(tempfile.mkdtemp(prefix="kb-bench-bind-"))
    cache = bindcache.cache_dir(work)
    rows: dict[str, list[float]] = {}
    paths: dict[str, str] = {}
    n = 0

    def sources(k: int, block: int = 256, decl_k: int | None = None):
        if args.cuda:
            return (DECL if decl_k is None else DECL + f" // {decl_k}"), CU.format(k=k, block=block)
        return CPP.format(k=k if decl_k is None else decl_k), None

    def wrapped(case: str, cpp: str, cu: str | None) -> Path:
        nonlocal n
        n += 1
        build_root = work / f"cand{n}"
        w = LoadInlineWrapper(build_root, "9.0", cuda_torch=torch.version.cuda is not None, salt=str(n),
                              bind_root=cache)  # fmt: skip
        w.install()
        try:
            t0 = time.perf_counter()
            mod = ce.load_inline("bench_ext", cpp, cu, functions=["add_k"])
            rows.setdefault(case, []).append(time.perf_counter() - t0)
        finally:
            ce.load_inline = original
        dev = "cuda" if args.cuda else "cpu"
        assert float(mod.add_k(torch.zeros(4, device=dev)).sum()) > 0
        paths[case] = w.builds[-1].get("path", "?")
        return build_root

    for r in range(args.repeat):
        k = 10 * r + 1
        cpp, cu = sources(k)
        d = work / f"stock{r}"
        d.mkdir()
        t0 = time.perf_counter()
        original(f"bench_stock{r}", cpp, cu, functions=["add_k"], build_directory=str(d), use_pch=False)
        rows.setdefault("stock", []).append(time.perf_counter() - t0)
        cpp, cu = sources(k + 1)
        first = wrapped("own_binding", cpp, cu)
        t0 = time.perf_counter()
        out = bindcache.publish(first, cache, pch=False)
        rows.setdefault("publish", []).append(time.perf_counter() - t0)
        assert [o["status"] for o in out] == ["published"], out
        cpp2, cu2 = sources(k + 1, block=128) if args.cuda else (cpp, None)
        wrapped("cached_binding", cpp2, cu2)
    if args.pch:
        cpp, cu = sources(1000)
        spec = json.loads(next((cache / "objects").glob("*/entry.json")).read_text())["spec"]
        t0 = time.perf_counter()
        assert bindcache._build_pch(cache, spec, 1800.0), "the precompiled header did not build"
        rows["pch_build"] = [time.perf_counter() - t0]
        for r in range(args.repeat):
            cpp, cu = sources(2000 + r, decl_k=2000 + r)
            built = wrapped("own_with_pch", cpp, cu)
        gxx(next(built.glob("bench_ext_*")), cache, rows)
    for case, secs in rows.items():
        line = {"case": case, "median_s": round(statistics.median(secs), 2), "all_s": [round(s, 2) for s in secs],
                "path": paths.get(case)}  # fmt: skip
        print(json.dumps(line), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)  # the builds and the cache (with --pch, about 0.8 GB)


def gxx(build_dir: Path, cache: Path, rows: dict) -> None:
    """main.cpp of `build_dir` compiled by hand with its build file's flags, without and with the header."""
    lines = (build_dir / "build.ninja").read_text().splitlines()
    cxx = next(ln for ln in lines if ln.startswith("cxx = "))[6:]
    cflags = next(ln for ln in lines if ln.startswith("cflags = "))[9:]
    header = next((cache / "pch").glob(f"*/{bindcache.PCH_HEADER}"))
    base = [*shlex.split(cxx), *shlex.split(cflags), "-c", str(build_dir / "main.cpp"), "-o"]
    for case, extra in (
        ("gxx_main_cpp", []),
        ("gxx_main_cpp_pch", ["-Winvalid-pch", "-include", str(header)]),
    ):
        t0 = time.perf_counter()
        subprocess.run([*base, str(build_dir / f"{case}.o"), *extra], check=True)
        rows[case] = [time.perf_counter() - t0]


if __name__ == "__main__":
    main()
