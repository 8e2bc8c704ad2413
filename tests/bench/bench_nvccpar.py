"""Seconds of nvcc on a load_inline `.cu` by nvcc itself (per phase, `nvcc --time`) and through
evaluator.nvccpar (host and device front ends at once), and whether the objects are the same:

    python tests/bench/bench_nvccpar.py [--repeat 3] [--include DIR] [--arch 90] [KERNEL.cu ...]

The kernels default to tests/bench/nvccpar_kernels (an elementwise kernel, a row reduction through
AT_DISPATCH with the CUDA stream and guard, a tiled GEMM), each compiled as load_inline writes it (torch/types.h,
cuda.h, cuda_runtime.h first; the candidate's torch/extension.h dropped as evaluator.build does) with the
flags torch passes plus -O3. --include adds a header folder (a CPU torch lacks cuSPARSE's headers and
c10/cuda/impl/cuda_cmake_macros.h, which ATen/cuda/CUDAContext.h needs). Stock and parallel alternate.
One JSON line per kernel: {"case", "stock_s", "parallel_s" (medians), "saving", "phases_s" (nvcc --time,
median per phase), "identical", "paths"}.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kb_agent.evaluator import nvccpar  # noqa: E402
from kb_agent.evaluator.build import find_nvcc  # noqa: E402

HALF = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]  # fmt: skip
PREFIX = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


def flags(arch: str, extra: list[str]) -> list[str]:
    import torch.utils.cpp_extension as ce

    paths = ce.include_paths() + [sysconfig.get_paths()["include"]]
    if ce.CUDA_HOME:
        paths.append(str(Path(ce.CUDA_HOME) / "include"))
    inc = [a for p in [*paths, *extra] for a in ("-isystem", p)]
    return ["-DTORCH_EXTENSION_NAME=kb_bench", "-DTORCH_API_INCLUDE_EXTENSION_H", *inc, *HALF,
            f"-gencode=arch=compute_{arch},code=sm_{arch}", "--compiler-options", "-fPIC", "-O3", "-std=c++20"]  # fmt: skip


def phases(csv_path: Path) -> dict[str, float]:
    rows = list(csv.reader(csv_path.read_text().splitlines()))[1:]
    return {r[1].strip(): float(r[-2]) / 1000 for r in rows if len(r) > 3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--arch", default="90")
    a = ap.parse_args()
    nvcc = find_nvcc()
    if nvcc is None:
        sys.exit("no nvcc")
    kernels = a.kernels or sorted((Path(__file__).parent / "nvccpar_kernels").glob("*.cu"))
    args = flags(a.arch, a.include)
    norm = lambda p: re.sub(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}", b"tmpxft_X", p.read_bytes())  # noqa: E731
    for k in kernels:
        with tempfile.TemporaryDirectory() as t:
            cu = Path(t) / "cuda.cu"
            cu.write_text(PREFIX + re.sub(r"(?m)^\s*#\s*include\s*<torch/extension\.h>", "", k.read_text()))
            stock, par, per, same, paths = [], [], [], True, []
            for i in range(a.repeat):
                t0 = time.perf_counter()
                r = subprocess.run([nvcc, *args, "-c", str(cu), "-o", f"{t}/s.o", "--time", f"{t}/t{i}.csv"],
                                   capture_output=True, text=True)  # fmt: skip
                stock.append(time.perf_counter() - t0)
                if r.returncode:
                    sys.exit(f"{k.name}: nvcc failed:\n{r.stdout}{r.stderr}"[-3000:])
                per.append(phases(Path(t) / f"t{i}.csv"))
                t0 = time.perf_counter()
                rc, out, record = nvccpar.compile_parallel(nvcc, [*args, "-c", str(cu), "-o", f"{t}/p.o"])
                par.append(time.perf_counter() - t0)
                paths.append(record["path"])
                same = same and rc == 0 and norm(Path(t) / "s.o") == norm(Path(t) / "p.o")
            s, p = statistics.median(stock), statistics.median(par)
            ph = {name: round(statistics.median(d[name] for d in per), 2) for name in per[0]}
            print(json.dumps({"case": k.stem, "stock_s": round(s, 2), "parallel_s": round(p, 2),
                              "saving": round(1 - p / s, 3), "phases_s": ph, "identical": same, "paths": paths}),
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
