"""A light `torch/types.h` for a candidate's CUDA sources, found before torch's own by nvcc.

`load_inline` puts `#include <torch/types.h>` first in every `.cu`. That header is all of ATen (every
operator's declaration through `ATen/Functions.h`, `NativeFunctions.h`), autograd's variable and its
factories, and `torch/library.h`, and nvcc's three front ends (cudafe++, cicc, the host compiler) each parse
it. Most candidates' `.cu` use only a Tensor's methods, a few factories (`torch::empty_like`,
`torch::empty({n}, x.options())`), `TORCH_CHECK` and the `AT_DISPATCH_*` macros. The light header holds
exactly that: `ATen/core/Tensor.h` (the Tensor class, its options and scalar types), `ATen/Dispatch.h`,
`c10/util/Logging.h` (`TORCH_CHECK_EQ` and its kin),
one `ATen/ops/<name>.h` per operator whose name the sources call (the per-operator headers torch generates
for its own sources), and the aliases torch/types.h gives namespace torch (`using namespace at`,
`torch::kFloat32`, ...), read from this torch's own torch/types.h, so they follow its version.
Measured with nvcc 13.0 on a 2-core machine, a one-kernel `.cu` (`torch::empty_like`, `TORCH_CHECK`):
29.0 s against torch/types.h, 11.6 s against the light header; through `evaluator.nvccpar` 18.3 s and
7.8 s.

Where it goes: `write(folder, sources)` writes `<folder>/kb_prelude/torch/types.h`, and the build passes
`-Ikb_prelude` to nvcc only (a path relative to the build folder, where ninja runs nvcc: no absolute path,
which could contain "arch" and trip torch's architecture test, `build._torch_drops_arch`). `-I` folders are
searched before torch's `-isystem` ones, so `#include <torch/types.h>` in the `.cu` finds this one; main.cpp
(the bindings) is compiled as before, against the whole of torch/extension.h.

The contract stays: sources that need more than the light header (`applies` says no to autograd, modules of
the C++ frontend, operator libraries, pybind11, and an include of one of torch's umbrella headers) build
against torch's header as before, and a light build that fails for want of a declaration (a Tensor operator
such as `a + b`, which lives in `ATen/TensorOperators.h`, or a name only the whole of ATen declares) is built
again without it (`build.light_first`); the build's record says which header served (`cuda_include`).
What compiles against the light header means what it means against the whole: the Tensor class, the
operators' declarations and the aliases are torch's own; only autograd's factory wrappers in namespace torch
(`torch::empty_like` setting `requires_grad` from its options) are not there, and sources naming
`requires_grad` or `autograd` do not get the light header.

Slim operator headers (`write(..., slim=True)`, tried first, `build.light_first`'s "slim"): every
per-operator header torch generates from Function.h includes the same eleven headers, of which
`ATen/Context.h`, `ATen/DeviceGuard.h`, `ATen/TensorUtils.h` and `ATen/TracerMode.h` (`HEAVY`) declare
nothing its inline functions declare or call, and cost about as much to parse as the rest of the light
header (though two argument types are left incomplete without them: an operator taking an
ITensorListRef or a c10::List, such as `cat` or `index`, keeps torch's own header). The slim
build writes, beside the light header, a copy of each named operator's header without those four includes
(`kb_prelude/ATen/ops/<name>.h`, found before torch's through the same `-Ikb_prelude`, so a header of torch
that includes it gets the same one file and `#pragma once` holds). Its functions are torch's own text.
The slim copies of torch 2.13's function headers compile together against the slim header (g++ and nvcc
13.0; compiling a declaration is not calling it, which is how `cat`'s incomplete type was missed); a
one-kernel `.cu` on a 2-core machine: 11.8 s of nvcc against the light header, 6.6 s against the slim one.
A source that wants what the four declare (`device_of`, `at::globalContext()`, `checkAllSameGPU`) fails the
slim build for want of a declaration and is built against the light header; `heavy_names` says which names
that retry could find, so that a typo goes on to torch's header without a light build that would fail too.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

FOLDER = "kb_prelude"  # under the build folder; nvcc gets -I<FOLDER>
INCLUDE_FLAG = f"-I{FOLDER}"

# the sources need what only torch's whole header gives (or bring it in themselves)
_NEEDS_WHOLE = re.compile(
    r"\bautograd\b|requires_grad|\btorch::(?:nn|jit|optim|data|serialize|special|fft|linalg)\b|TORCH_LIBRARY"
    r"|pybind11|PYBIND11_|\bpy::"
    # an operator of the candidate's own on Tensors: a heavier header's (ATen/TensorOperators.h,
    # Formatting.h's <<) would make it ambiguous, which a light build cannot see (found by a fresh helper)
    r"|\boperator\s*(?:[^\s\w(]+|\w+)\s*\([^)]*\bTensor\b"
    r'|^[ \t]*#[ \t]*include[ \t]*[<"](?:ATen/ATen\.h|torch/(?:torch|all|extension|library|script)\.h)[>"]',
    re.MULTILINE,
)
# an operator's name: qualified (`torch::empty_like`, `at::zeros`) or called unqualified (`empty_like(x)`);
# not a method (`.add(`, `->add(`), which the Tensor class declares
_QUALIFIED = re.compile(r"\b(?:torch|at)\s*::\s*([A-Za-z_]\w*)")
_CALLED = re.compile(r"(?<![.\w>:])([a-z_]\w*)\s*\(")
_ALIAS = re.compile(
    r"^\s*(using\s+namespace\s+at\s*;|using\s+std::\w+\s*;|using\s+\w+\s*=\s*[\w:]+\s*;"
    r"|constexpr\s+auto\s+\w+\s*=\s*[\w:]+\s*;)"
)
_BASE = ("ATen/core/Tensor.h", "ATen/Dispatch.h", "c10/util/Exception.h", "c10/util/Logging.h", "optional")
# the includes of a generated per-operator header that its functions do not need (module doc)
HEAVY = ("ATen/Context.h", "ATen/DeviceGuard.h", "ATen/TensorUtils.h", "ATen/TracerMode.h")
_GENERATED = "@generated by torchgen/gen.py from Function.h"
# argument types the slim base leaves incomplete (HEAVY completes them: `torch::cat({a, b})` needs
# ITensorListRef whole, found by a fresh helper): an operator taking one keeps torch's own header
_INCOMPLETE_IN_SLIM = re.compile(r"\bI\w*ListRef\b|\bc10::List<")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<([^>]+)>[ \t]*$")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


@functools.cache
def _torch_include() -> Path:
    import torch

    return Path(torch.__file__).parent / "include"


@functools.cache
def torch_aliases() -> tuple[str, ...]:
    """The declarations of namespace torch in this torch's torch/types.h that are aliases (`using namespace
    at;`, `using Dtype = at::ScalarType;`, `constexpr auto kFloat32 = at::kFloat;`), in order; empty when
    the header is not found or has no `using namespace at;` (then no light header is written)."""
    path = _torch_include() / "torch" / "csrc" / "api" / "include" / "torch" / "types.h"
    try:
        text = path.read_text()
    except OSError:
        return ()
    found = [m.group(1).strip() for ln in text.splitlines() if (m := _ALIAS.match(ln))]
    return tuple(found) if any(re.fullmatch(r"using\s+namespace\s+at\s*;", a) for a in found) else ()


@functools.cache
def functions_tail() -> tuple[str, tuple[str, ...]] | None:
    """The part of this torch's ATen/Functions.h after its per-operator includes: C++-only overloads such
    as `at::var(const Tensor&, int dim)` (without it `torch::var(x, 1)` takes 1 for `unbiased` and
    computes another thing: found by a fresh helper) and `at::size(t, dim)`, `at::numel(t)`. Returns (its
    text, the operators it calls, whose headers the light header then includes), or None where the file
    or its shape is not as expected (then no light header is tried)."""
    try:
        text = (_torch_include() / "ATen" / "Functions.h").read_text()
    except OSError:
        return None
    last = text.rfind("#include <ATen/ops/")
    end = text.rfind("#else")
    if last < 0 or end < last:
        return None
    tail = text[text.index("\n", last) + 1 : end].strip()
    if not tail.startswith("namespace at {") or "#" in tail:
        return None
    called = sorted(set(re.findall(r"\bat::(\w+)\s*\(", tail)))
    return tail, tuple(n for n in called if (_torch_include() / "ATen" / "ops" / f"{n}.h").is_file())


def applies(cuda_sources: list[str]) -> bool:
    """Whether the light header may be tried for these CUDA sources (see the module doc)."""
    text = "\n".join(cuda_sources)
    return (
        bool(cuda_sources)
        and not _NEEDS_WHOLE.search(text)
        and bool(torch_aliases())
        and functions_tail() is not None
    )


def operators(cuda_sources: list[str]) -> list[str]:
    """The operators (names with an `ATen/ops/<name>.h` in this torch) that the sources name, and those
    `functions_tail` calls, sorted."""
    text = "\n".join(cuda_sources)
    ops = _torch_include() / "ATen" / "ops"
    names = (
        set(_QUALIFIED.findall(text)) | set(_CALLED.findall(text)) | set((functions_tail() or ("", ()))[1])
    )
    return sorted(n for n in names if (ops / f"{n}.h").is_file())


def header(cuda_sources: list[str]) -> str:
    """The text of the light torch/types.h for these sources."""
    lines = ["#pragma once", "// kb-agent's light torch/types.h (kb_agent.evaluator.prelude)"]
    lines += [f"#include <{h}>" for h in _BASE]
    lines += [f"#include <ATen/ops/{name}.h>" for name in operators(cuda_sources)]
    lines += [(functions_tail() or ("",))[0]]
    lines += ["namespace torch {", *torch_aliases(), "}  // namespace torch", ""]
    return "\n".join(lines)


def slim_operator_header(name: str) -> str | None:
    """torch's `ATen/ops/<name>.h` without its includes of `HEAVY`, or None when it is not a header
    generated from Function.h or includes none of them (then torch's own serves)."""
    try:
        text = (_torch_include() / "ATen" / "ops" / f"{name}.h").read_text()
    except OSError:
        return None
    if _GENERATED not in text or _INCOMPLETE_IN_SLIM.search(text):
        return None
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if not ((m := _INCLUDE.match(ln)) and m.group(1) in HEAVY)]
    return "".join(kept) if len(kept) < len(lines) else None


# The light ATen/cuda/CUDAContext.h of the slim build. torch's own holds CUDAContextLight.h (the cuBLAS,
# cuSPARSE, cuSOLVER and cuDSS handles, device properties: their libraries' headers), ATen/Context.h and
# ATen/cuda/Exceptions.h beside c10's streams; most candidates include it for
# `at::cuda::getCurrentCUDAStream()` alone. Measured on the 2-core machine, g++ of a ReLU's host unit
# (`evaluator.splitcu`) against the slim torch/types.h: 3.3 s with torch's, 2.2 s with this one. Written
# only for sources that name nothing beyond the streams, the device functions and the launch checks
# (`light_cuda_context`); a name it lacks fails the slim build for want of a declaration, and the next
# try has torch's header.
CUDA_CONTEXT = "ATen/cuda/CUDAContext.h"
_CUDA_CONTEXT_TEXT = """#pragma once
// kb-agent's light ATen/cuda/CUDAContext.h (kb_agent.evaluator.prelude): c10's CUDA streams, device
// functions and launch checks, which torch's own includes too
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Logging.h>
"""
_INCLUDES_CUDA_CONTEXT = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"]ATen/cuda/CUDAContext\.h[>"]', re.MULTILINE
)
# what torch's CUDAContext.h declares beyond the light one (and a margin: any guard, allocator, handle,
# workspace, property or `detail`)
_BEYOND_STREAMS = re.compile(
    r"\b(?:AT_CUDA_\w+|AT_CUDNN_\w+|TORCH_CU\w*_CHECK|\w*Properties|warp_size|\w*Handle\w*|\w*Workspace\w*"
    r"|globalContext|Context|getNumGPUs|is_available|canDeviceAccessPeer|\w*Allocator\w*|cublas\w*|cusparse\w*"
    r"|cusolver\w*|cudss\w*|\w*Guard\w*|detail|\w*Generator\w*|\w*Graph\w*)\b"
)


def light_cuda_context(cuda_sources: list[str]) -> bool:
    """Whether the slim build gives these sources the light ATen/cuda/CUDAContext.h: they include it and
    name nothing it leaves out (`_BEYOND_STREAMS`)."""
    text = "\n".join(cuda_sources)
    return bool(_INCLUDES_CUDA_CONTEXT.search(text)) and not _BEYOND_STREAMS.search(text)


def _write_if_changed(target: Path, text: str) -> None:
    try:
        if target.read_text() == text:
            return
    except OSError:
        target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def write(folder: Path, cuda_sources: list[str], slim: bool = False) -> None:
    """Write the light header under `folder` (the build folder), for `-Ikb_prelude` run from there, and with
    `slim` the slim copies of the operators' headers beside it (module doc) and, where it serves, the
    light ATen/cuda/CUDAContext.h (`light_cuda_context`); without `slim` none of them is left there. An unchanged file is left as it is: the `.cu`'s dependency file names it, and a newer one would
    make ninja compile the `.cu` again (a split evaluation's run child loads the build child's module
    through the same load_inline call: seen on the H200, 9.4 s of nvcc for nothing)."""
    root = Path(folder) / FOLDER
    _write_if_changed(root / "torch" / "types.h", header(cuda_sources))
    ops = root / "ATen" / "ops"
    wanted = {}
    if slim:
        for name in operators(cuda_sources):
            text = slim_operator_header(name)
            if text is not None:
                wanted[f"{name}.h"] = text
    for stale in ops.glob("*.h") if ops.is_dir() else ():
        if stale.name not in wanted:
            stale.unlink(missing_ok=True)
    for file, text in wanted.items():
        _write_if_changed(ops / file, text)
    context = root / CUDA_CONTEXT
    if slim and light_cuda_context(cuda_sources):
        _write_if_changed(context, _CUDA_CONTEXT_TEXT)
    else:
        context.unlink(missing_ok=True)


@functools.cache
def preprocessed(
    nvcc: str, std: str, arch: str, includes: tuple[str, ...], text: str
) -> tuple[frozenset[str], frozenset[str]] | None:
    """(identifiers, macros' names) of a translation unit of `text` (include lines) as nvcc's device pass
    for `arch` ("9.0") and its host pass preprocess it (`nvcc -E -arch=sm_90 -Xcompiler -dD`, then again
    with `-Xcompiler -U__CUDA_ARCH__`: `nvcc -E` alone is the device pass), with these `includes` (torch's,
    Python's) as `-isystem`; the identifiers include the macros' names and what macros paste together.
    Once per process (no file keeps it: a candidate could write one for the next); None when a pass
    fails. torch/extension.h: 3-4 s on a 2-core machine."""
    import tempfile

    sm = "sm_" + arch.replace(".", "")
    inc = [a for p in includes for a in ("-isystem", p)]
    names: set[str] = set()
    macros: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="kb-names-") as t:
        cu = Path(t) / "tu.cu"
        cu.write_text(text)
        for extra in ([f"-arch={sm}"], ["-Xcompiler", "-U__CUDA_ARCH__"]):
            out = Path(t) / "tu.ii"
            cmd = [nvcc, "-E", std, "-Xcompiler", "-dD", *extra, *inc, str(cu), "-o", str(out)]
            try:
                r = subprocess.run(cmd, capture_output=True, timeout=300)
                if r.returncode:
                    return None
                pre = out.read_text(errors="replace")
            except (OSError, subprocess.SubprocessError):
                return None
            names.update(_IDENT.findall(pre))
            macros.update(_DEFINE.findall(pre))
    return frozenset(names), frozenset(macros)


WHOLE = "#include <torch/extension.h>\n"  # the heaviest header a candidate's .cu is ever built against
TYPES_H = "#include <torch/types.h>\n"
LIGHT_BASE = "".join(f"#include <{h}>\n" for h in _BASE)  # what every light build includes


def whole_names(nvcc: str, std: str, arch: str, includes: tuple[str, ...]) -> frozenset[str] | None:
    """The identifiers, macros' names included, of torch/extension.h (`preprocessed`): every name that any
    heavier try of `build.light_first` could declare beyond what the slim one had (torch/types.h, which
    load_inline puts first, is part of it). A name outside it is declared by no torch header: a build
    that lacks it fails the same way against all of them. None when unknown."""
    got = preprocessed(nvcc, std, arch, includes, WHOLE)
    return None if got is None else got[0]


def macros_beyond(
    nvcc: str, std: str, arch: str, includes: tuple[str, ...], lighter: str
) -> frozenset[str] | None:
    """The macros torch/extension.h defines that the translation unit of `lighter` (`LIGHT_BASE`,
    `TYPES_H`) does not (`preprocessed`): a source that spells one (`TORCH_VERSION_MAJOR`, `PRId64`,
    `AT_DISALLOW_COPY_AND_ASSIGN`, `C10_DEFINE_TLS_static`) may fail against the lighter header in any way
    at all (a syntax error, its own names undefined), and is then built against the next heavier one.
    None when unknown."""
    whole, light = (preprocessed(nvcc, std, arch, includes, t) for t in (WHOLE, lighter))
    return None if whole is None or light is None else whole[1] - light[1]


@functools.cache
def heavy_names() -> frozenset[str] | None:
    """The identifiers in what `HEAVY` brings in beyond the light header's base: the host compiler's
    preprocessed text of `HEAVY` after the base's, so names pasted by macros count. A name outside it
    cannot be declared by a light build where a slim one lacked it. None when the compiler fails (then
    every slim build that lacks a declaration is tried with the light header). About 0.5-1 s, once per
    process."""
    mark = "kb_prelude_heavy_begins"
    text = LIGHT_BASE + f"{mark}\n" + "".join(f"#include <{h}>\n" for h in HEAVY)
    inc = _torch_include()
    cmd = [os.environ.get("CXX", "c++"), "-std=c++17", "-E", "-P", "-isystem", str(inc), "-isystem",
           str(inc / "torch" / "csrc" / "api" / "include"), "-x", "c++", "-"]  # fmt: skip
    try:
        r = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode or mark not in r.stdout:
        return None
    return frozenset(_IDENT.findall(r.stdout.split(mark, 1)[1]))
