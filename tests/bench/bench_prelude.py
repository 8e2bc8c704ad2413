"""Which torch header each CUDA candidate's .cu builds against, and how long each try takes.

    python tests/bench/bench_prelude.py [--jobs 2] [FILE ...]

For every candidate (default: the repo's honest CUDA candidates, the CUDA test candidates, and the
scripted replies of tests/bench/solve_2_40 and strategies_1_19_21, whose last ```python block is the
candidate), the CUDA sources its `load_inline` call passes are captured (the module is run with
load_inline replaced by a recorder that stops it there; run it only on candidates you trust) and compiled
through `build.light_first` (its early end included, `build.torch_headers`) with the compile check a CPU
machine uses (`nvcc --dryrun` of the flags, then `nvcc -ptx`), so the light torch/types.h with slim
operator headers, then with torch's (`evaluator.prelude`), then torch's torch/types.h, then the sources as
written are tried as in a real build. On a GPU machine's torch the same sources go through the real build
instead; this script measures the compile check only. Prints one JSON line per candidate:

    {"candidate": …, "include": "slim" | "prelude" | "types_h" | "given" | null, "tries": [[include, seconds, "ok" | first error]]}

and a last line {"candidates": N, "includes": {include: count}, "unavailable": M}, where `unavailable`
counts candidates this machine cannot check (a header such as cusparse.h that a CPU torch and toolkit
lack: `CudaUnavailable`).
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = [
    *sorted((ROOT / "tests" / "redteam" / "candidates").glob("honest_cuda_*.py")),
    *sorted((ROOT / "tests" / "candidates").glob("cuda_*.py")),
    *sorted((ROOT / "tests" / "bench" / "solve_2_40").glob("*.md")),
    *sorted((ROOT / "tests" / "bench" / "strategies_1_19_21").glob("*.md")),
]


class _Captured(Exception):
    pass


def capture(path: Path) -> dict | None:
    """The arguments of the candidate's first load_inline call, or None when it makes none."""
    import torch.utils.cpp_extension as ce

    def recorder(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        as_list = lambda s: [s] if isinstance(s, str) else list(s or [])  # noqa: E731
        raise _Captured({"cu": as_list(cuda_sources), "flags": kwargs.get("extra_cuda_cflags") or []})

    original, ce.load_inline = ce.load_inline, recorder
    try:
        if path.suffix == ".md":
            blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
            if not blocks:
                return None
            exec(compile(blocks[-1], str(path), "exec"), {"__name__": "candidate"})
        else:
            runpy.run_path(str(path), run_name="candidate")
    except _Captured as got:
        return got.args[0]
    finally:
        ce.load_inline = original
    return None


def check(name: str, got: dict) -> dict:
    from kb_agent.evaluator.build import (
        BuildError,
        CudaUnavailable,
        _syntax_check,
        light_first,
        torch_headers,
    )

    folder = Path(tempfile.mkdtemp(prefix="kb-prelude-"))
    tries: list[list] = []

    def attempt(sources, include):
        t0 = time.perf_counter()
        try:
            _syntax_check([], sources, {"extra_cuda_cflags": got["flags"]}, folder, "9.0", include)
        except (BuildError, CudaUnavailable) as e:
            first = (getattr(e, "errors", None) or [str(e)])[0].split("\n", 1)[0]
            tries.append([include, round(time.perf_counter() - t0, 2), first[:200]])
            raise
        tries.append([include, round(time.perf_counter() - t0, 2), "ok"])

    include = unavailable = None
    try:
        include = light_first(got["cu"], attempt, torch_headers({"extra_cuda_cflags": got["flags"]}, "9.0"))[
            1
        ]
    except CudaUnavailable:
        unavailable = True
    except BuildError:
        pass
    return {
        "candidate": name,
        "include": include,
        "tries": tries,
        **({"unavailable": True} if unavailable else {}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    found = [
        (str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p), capture(p)) for p in args.files or DEFAULT
    ]
    items = [(n, g) for n, g in found if g and g["cu"]]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        lines = list(pool.map(lambda item: check(*item), items))
    for line in lines:
        print(json.dumps(line), flush=True)
    print(json.dumps({"candidates": len(lines), "includes": dict(Counter(ln["include"] for ln in lines if ln["include"])),
                      "unavailable": sum(1 for ln in lines if ln.get("unavailable"))}))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
