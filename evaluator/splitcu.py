"""A load_inline `.cu` built as two translation units that compile at once: the device code, which nvcc
compiles without torch's headers, and the torch-facing host code, which g++ compiles without nvcc.

Why: nvcc parses everything the `.cu` includes three times (cudafe++, cicc, the host compiler), and a
candidate's `.cu` includes torch's headers for its wrapper functions. Measured with nvcc 13.0 on a 2-core
machine, a one-kernel ReLU `.cu` against the slim torch/types.h (`evaluator.prelude`): host preprocessor
0.74 s, cudafe++ 3.5 s, cicc 3.2 s, host g++ 3.0 s; the same kernel without torch 0.6 s in all, and its
wrapper function alone, g++ against the same slim header, 2.1 s. On the H100 that `.cu` took 7.2 s of
nvcc, the whole critical path of a refinement turn (issue 13).

How: `split` cuts the `.cu` (as load_inline wrote it: its `#include <torch/types.h>`, then the
candidate's sources) into top-level items and sorts them:

* kernels (`__global__`, not templates) and other device code (`__device__`, `__constant__`, ...,
  CUDA's device libraries and their namespaces: cub, cooperative_groups, nvcuda) go to the device unit;
  after each kernel comes its launcher, a `struct kb_launch_NAME` made from the launch configuration
  whose `operator()`, taking the kernel's own parameters, launches it with `<<<...>>>`;
* what names torch, and every other host function or variable, goes to the host unit, where each launch
  `NAME<<<grid, block[, shmem[, stream]]>>>(args)` becomes `kb_launch_NAME(grid, block, shmem,
  stream)(args)` (0 for the shared memory and stream left out, as `<<<>>>` has them; the configuration
  is evaluated before the arguments, as nvcc has it) and the launcher's struct is declared where the
  kernel was;
* types, constants, macros and torch-free includes go to both; both start with the half types' headers,
  which torch's headers give a whole `.cu`.

Arguments reach the kernel's parameters through the launcher's parameters of the same types, so they are
converted as the launch converted them. The host unit is compiled with what nvcc gave the `.cu`'s host
code: its `-D`, `-U`, `-I`, `-std`, `-O` and `-Xcompiler` flags (`host_flags`); it starts with
`#include <cuda_runtime.h>`, which nvcc includes first in every `.cu`.

What is not split (`Unsplittable`, and the `.cu` is built whole as before): template kernels, a launch of
anything but a kernel defined here by its plain name, a kernel named outside a launch (a function
pointer, `cudaFuncSetAttribute`), a name that device-only code declares and host code names (a
specialization that changes a shared struct's layout, an overload the host would not see, a
`__constant__` symbol: helper-33 found the first two compiling, linking and passing other values),
conditional directives (`#if`, `#ifdef`), `__CUDACC__`, `__NVCC__` or `__CUDA_ARCH__` in host code (g++
would read it otherwise than nvcc), unqualified `min`/`max` in host code, torch's `C10_HOST_DEVICE`,
namespaces, `extern "C"` blocks, quoted includes, and nvcc flags this module does not know. A split build
that fails is built whole by the caller, which says so in the build's record
(`evaluator.bindcache.JitHook`); so is one whose module would leave a launcher undefined. Off unless
KB_SPLIT_CU=1 (`enabled`). Still open: `__FILE__` and `__LINE__` in host code name `cuda_host.cpp` and
its lines.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess

LAUNCHER_PREFIX = "kb_launch_"
DEVICE_FILE = "cuda_dev.cu"
HOST_FILE = "cuda_host.cpp"
FAILED_MARK = "kb_split_failed.json"  # in a build folder: its split build failed, build it whole
HOST_RULE = "kb_host_compile"


class Unsplittable(ValueError):
    """This `.cu` (or its flags) is built whole; the message says why."""


@dataclasses.dataclass(frozen=True)
class Split:
    """The two translation units of one `.cu`: `device` for nvcc, `host` for g++; `kernels` the
    kernels it launches through launchers."""

    device: str
    host: str
    kernels: tuple[str, ...]


def enabled() -> bool:
    """Whether load_inline builds split their `.cu`: with KB_SPLIT_CU=1 only, until the split has been
    checked on a GPU (tests/evaluator/test_splitcu_gpu.py, bench_latency.py); written 2026-12-08, when no
    GPU was lent."""
    return os.environ.get("KB_SPLIT_CU", "0") == "1"


# -- reading the source --------------------------------------------------------------------------------
def _literal_end(text: str, i: int) -> int:
    """The offset of the quote that closes the string or character literal opened at `text[i]`.
    Raises Unsplittable where the line (or the text) ends first."""
    j = i + 1
    while j < len(text) and text[j] != text[i]:
        if text[j] == "\n":
            raise Unsplittable("an unterminated string or character literal")
        j += 2 if text[j] == "\\" else 1
    if j >= len(text):
        raise Unsplittable("an unterminated string or character literal")
    return j


def mask(text: str) -> str:
    """`text` with comments blanked and the contents of string and character literals replaced by
    spaces (newlines kept), so that offsets are the same and nothing inside them reads as code.
    Raises Unsplittable for an unterminated literal or comment."""
    out, i, n = list(text), 0, len(text)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = i
            while True:  # a line that ends in a backslash continues the comment (helper-33)
                j = text.find("\n", j)
                if j < 0 or not text[:j].rstrip("\r").endswith("\\"):
                    break
                j += 1
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise Unsplittable("an unterminated comment")
            blank(i, j + 2)
            i = j + 2
        elif c == '"':
            raw = re.search(r"(?:\b|^)(?:u8|u|U|L)?R$", text[max(0, i - 3) : i])
            if raw:
                m = re.compile(r"([^\s()\\]{0,16})\(").match(text, i + 1)
                if not m:
                    raise Unsplittable("a raw string literal this module cannot read")
                end = text.find(")" + m.group(1) + '"', m.end())
                if end < 0:
                    raise Unsplittable("an unterminated raw string literal")
                blank(i + 1, end + len(m.group(1)) + 1)
                i = end + len(m.group(1)) + 2
                continue
            j = _literal_end(text, i)
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            start = i - 1
            while start >= 0 and (text[start].isalnum() or text[start] in "_'."):
                start -= 1
            if i > 0 and text[start + 1 : i][:1].isdigit():  # a digit separator: 1'000'000
                i += 1
                continue
            j = _literal_end(text, i)
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


@dataclasses.dataclass
class _Item:
    start: int
    end: int
    directive: bool


_OPEN, _CLOSE = "([{", ")]}"


def _line_start(m: str, i: int) -> bool:
    j = m.rfind("\n", 0, i)
    return not m[j + 1 : i].strip()


def _directive_end(m: str, i: int) -> int:
    while True:
        j = m.find("\n", i)
        if j < 0:
            return len(m)
        if m[i:j].rstrip().endswith("\\"):
            i = j + 1
            continue
        return j


def _outside_brackets(text: str) -> str:
    """`text` without what its (), [] and {} enclose."""
    out, depth = [], 0
    for c in text:
        depth -= c in _CLOSE
        if depth == 0:
            out.append(c)
        depth += c in _OPEN
    return "".join(out)


def _without_template_clauses(text: str) -> str:
    """`text` without its `template <...>` clauses (a default `= 32` there is no initializer)."""
    out, i = [], 0
    for m in re.finditer(r"\btemplate\s*<", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"<": 1, ">": -1}.get(text[j], 0)
            j += 1
        out.append(text[i : m.start()])
        i = j
    return "".join(out) + text[i:]


def _needs_semicolon(head: str) -> bool:
    """Whether a top-level item whose first brace opens after `head` ends at a `;` (a class, an enum,
    an initializer) rather than at its closing brace (a function)."""
    head = _outside_brackets(_without_template_clauses(head)).strip()
    if re.search(r"=", re.sub(r"\boperator\s*[^\w\s(]+", "", head).replace("==", "")):
        return True
    return bool(re.search(r"\b(?:struct|class|union|enum)\b", head)) and not head.endswith(")")


def items(m: str) -> list[_Item]:
    """The top-level items of masked text `m` (`mask`): directives (a line starting with `#`, with its
    continuations) and declarations or definitions (up to a `;` or a function's closing brace). Raises
    Unsplittable for a namespace, an `extern "C"` block, unbalanced brackets, or a directive inside a
    top-level declaration."""
    out: list[_Item] = []
    i, n = 0, len(m)
    while i < n:
        if m[i].isspace() or m[i] == ";":
            i += 1
            continue
        if m[i] == "#":
            end = _directive_end(m, i)
            out.append(_Item(i, end, True))
            i = end
            continue
        start, depth, brace = i, 0, -1
        while True:
            if i >= n:
                if m[start:].strip():
                    raise Unsplittable("the source ends inside a declaration")
                break
            c = m[i]
            if c == "#" and _line_start(m, i):
                if depth == 0:
                    raise Unsplittable("a directive inside a top-level declaration")
                i = _directive_end(m, i)
                continue
            if c in _OPEN:
                if c == "{" and depth == 0 and brace < 0:
                    brace = i
                    head = m[start:i]
                    if re.search(r"\bnamespace\b|\bextern\s+\"", head):
                        raise Unsplittable("a namespace or an extern block")
                depth += 1
            elif c in _CLOSE:
                depth -= 1
                if depth < 0:
                    raise Unsplittable("unbalanced brackets")
                if c == "}" and depth == 0 and not _needs_semicolon(m[start:brace]):
                    i += 1
                    break
            elif c == ";" and depth == 0:
                i += 1
                break
            i += 1
        out.append(_Item(start, i, False))
    return out


# -- sorting the items ---------------------------------------------------------------------------------
_TORCH = re.compile(
    r"\b(?:torch|at|c10|caffe2|pybind11|py)\s*::|\b(?:Tensor|TORCH_\w+|AT_\w+|C10_\w+|PYBIND11_\w+)\b"
    r"|\bdata_ptr\b|\bnamespace\s+(?:torch|at|c10|caffe2)\b|\bpybind11\b"
)
_DEVICE = re.compile(r"\b__(?:device|constant|shared|managed|grid_constant)__\b")
# names of namespaces only nvcc's device code has (an alias or a using-directive of one is device code)
_CUDA_NAMESPACE = re.compile(
    r"\s*(?:using\s+)?namespace\b[^;{]*\b(?:cooperative_groups|nvcuda|wmma|cub|thrust|cute|cutlass|cuda)\b"
)
# headers of CUDA's device libraries, which nvcc finds (include/cccl) and g++ does not: device code only
_CUDA_LIBRARY_HEADER = re.compile(
    r"(?:cub|thrust|cuda|cute|cutlass|cooperative_groups)/|(?:cooperative_groups|mma|cuda_pipeline\w*|cuda_awbarrier\w*)\.h$"
)
# min and max unqualified: nvcc's host pass declares CUDA's host overloads of them, g++ does not
_BARE_MIN_MAX = re.compile(r"(?<![\w.:>])(?:min|max)\s*\(")
# torch's host-and-device markers: functions the device unit (no torch headers) cannot declare
_TORCH_DEVICE = re.compile(r"\bC10_(?:HOST_DEVICE|DEVICE|HOST)\b|\bC10_LAUNCH_BOUNDS\w*")
_ATTRIBUTES = re.compile(
    r"\b__align__\s*\(\s*\d+\s*\)|\balignas\s*\([^()]*\)|\b__launch_bounds__\s*\([^()]*\)"
)
_GLOBAL = re.compile(r"\b__global__\b")
_HOST_ONLY_NVCC = re.compile(r"\b(?:__CUDACC\w*__|__NVCC__|__CUDA_ARCH\w*__|__CUDA_\w+__)")
_TORCH_HEADER = re.compile(r"(?:torch|ATen|c10|caffe2|pybind11)/|Python\.h$")
_TYPE = re.compile(
    r"^\s*(?:template\s*<[^;{]*>\s*)?(?:typedef\b|using\b|static_assert\b|(?:struct|class|union|enum)\b[^(;]*[{;])"
)
_CONSTANT = re.compile(
    r"^\s*(?:static\s+|inline\s+)*(?:constexpr\b|const\s+(?:unsigned\s+|signed\s+)?[\w:]+\s+\w+\s*(?:\[[^\]]*\]\s*)*=)"
)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_NOT_A_NAME = {
    "const", "volatile", "__restrict__", "__restrict", "restrict", "int", "float", "double", "char", "bool",
    "long", "short", "unsigned", "signed", "void", "auto", "size_t", "half", "__half", "struct", "class",
}  # fmt: skip


@dataclasses.dataclass
class _Kernel:
    name: str
    params: str  # the parameter list as written
    names: list[str]  # the parameters' names


def _split_top(text: str, sep: str = ",", angles: bool = True) -> list[str]:
    """`text` cut at `sep` outside brackets (and, with `angles`, outside template angle brackets: for
    parameter types, not for expressions, where `<` is a comparison)."""
    parts, depth, angle, cur = [], 0, 0, []
    for c in text:
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "<" and depth == 0 and angles:
            angle += 1
        elif c == ">" and depth == 0 and angle:
            angle -= 1
        if c == sep and depth == 0 and angle == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def _kernel(src: str, m: str) -> _Kernel:
    """The name and parameters of one `__global__` item (masked `m`, original `src`)."""
    brace = m.find("{")
    head = m[: brace if brace >= 0 else len(m)]
    close = head.rfind(")")
    depth, open_ = 0, -1
    for k in range(close, -1, -1):
        depth += {")": 1, "(": -1}.get(head[k], 0)
        if depth == 0:
            open_ = k
            break
    name = re.search(r"([A-Za-z_]\w*)\s*$", head[:open_]) if open_ > 0 else None
    if close < 0 or name is None or name.group(1) in ("__launch_bounds__", "__global__"):
        raise Unsplittable("a kernel whose name and parameters this module cannot read")
    params_m, params = head[open_ + 1 : close], src[open_ + 1 : close]
    names = []
    if params_m.strip() not in ("", "void"):
        for p in _split_top(params_m):
            if re.search(r"[=(\[]|\.\.\.", p):
                raise Unsplittable(f"kernel {name.group(1)} has a parameter this module does not forward")
            words = _IDENT.findall(p)
            if len(words) < 2 or words[-1] in _NOT_A_NAME:
                raise Unsplittable(f"kernel {name.group(1)} has an unnamed parameter")
            names.append(words[-1])
    return _Kernel(name.group(1), " ".join(params.split()), names)


def _launcher_struct(k: _Kernel) -> str:
    """The launcher's type, the same text in both units: made from the launch configuration, then called
    with the kernel's arguments (`kb_launch_NAME(grid, block, shmem, stream)(args)`), so that the
    configuration is evaluated before the arguments, as nvcc's `<<<...>>>` has it (C++17 sequences a
    call's postfix expression before its arguments; helper-33: a `sizes[c++]` argument was read first)."""
    params = re.sub(r"\b__grid_constant__\b\s*", "", k.params)  # a kernel's parameter attribute only
    return (f"struct {LAUNCHER_PREFIX}{k.name} {{\n    dim3 grid, block;\n    size_t shmem;\n    cudaStream_t stream;\n"
            f"    {LAUNCHER_PREFIX}{k.name}(dim3 g, dim3 b, size_t s, cudaStream_t st)"
            f" : grid(g), block(b), shmem(s), stream(st) {{}}\n    void operator()({params}) const;\n}};")  # fmt: skip


def _launcher(k: _Kernel) -> str:
    params = re.sub(r"\b__grid_constant__\b\s*", "", k.params)
    return (f"{_launcher_struct(k)}\nvoid {LAUNCHER_PREFIX}{k.name}::operator()({params}) const {{\n"
            f"    {k.name}<<<grid, block, shmem, stream>>>({', '.join(k.names)});\n}}")  # fmt: skip


def _rewrite_launches(src: str, m: str, kernels: dict[str, _Kernel]) -> str:
    """Host code `src` (masked `m`) with each `NAME<<<cfg>>>(args)` a call of NAME's launcher."""
    out, pos = [], 0
    for hit in re.finditer(r"<<<", m):
        if hit.start() < pos:
            continue
        before = m[: hit.start()].rstrip()
        name = re.search(r"(?:(::|\.|->)\s*)?([A-Za-z_]\w*)$", before)
        if before.endswith(">"):
            raise Unsplittable("a launch of a template kernel")
        if name is None or name.group(1) or name.group(2) not in kernels:
            raise Unsplittable("a launch of something other than a kernel this source defines")
        depth, j = 0, hit.end()
        while j < len(m) and not (depth == 0 and m.startswith(">>>", j)):
            depth += (m[j] in _OPEN) - (m[j] in _CLOSE)
            j += 1
        if j >= len(m):
            raise Unsplittable("a launch without its closing >>>")
        config = [c.strip() for c in _split_top(src[hit.end() : j], angles=False)]
        paren = re.compile(r"\s*\(").match(m, j + 3)
        if not 2 <= len(config) <= 4 or not all(config) or paren is None:
            raise Unsplittable("a launch this module cannot read")
        depth, k = 0, paren.end() - 1
        while k < len(m):
            depth += (m[k] in _OPEN) - (m[k] in _CLOSE)
            if depth == 0:
                break
            k += 1
        args = src[paren.end() : k]
        config += ["0"] * (4 - len(config))
        call = f"{LAUNCHER_PREFIX}{name.group(2)}({', '.join(config)})({args if args.strip() else ''})"
        out += [src[pos : name.start(2)], call]
        pos = k + 1
    return "".join(out) + src[pos:]


def _head(m: str) -> str:
    """A masked item up to its body or initializer: its declaration."""
    cut = [i for i in (m.find("{"), m.find("=")) if i >= 0]
    return m[: min(cut)] if cut else m


_KEYWORDS = {"struct", "class", "union", "enum", "template", "typename", "static", "inline", "const", "constexpr",
             "extern", "volatile", "unsigned", "signed", "operator", "namespace", "using", "typedef"}  # fmt: skip


def _declared(m: str) -> set[str]:
    """The names a masked top-level item declares: a class's or an enum's, a function's, a variable's, a
    namespace alias's (a superset is fine: it only makes `split` refuse more)."""
    head = _ATTRIBUTES.sub("", _without_template_clauses(_head(m)))
    names = set()
    if tag := re.search(r"\b(?:struct|class|union|enum(?:\s+class)?)\s+([A-Za-z_]\w*)", head):
        names.add(tag.group(1))
    if alias := re.search(r"\bnamespace\s+([A-Za-z_]\w*)\s*$", head):
        names.add(alias.group(1))
    outside = _outside_brackets(head)
    if "(" in head:
        if fn := re.search(r"([A-Za-z_]\w*)\s*\($", head[: head.find("(") + 1]):
            names.add(fn.group(1))
    words = [w for w in _IDENT.findall(re.sub(r"\[[^\]]*\]", "", outside)) if w not in _KEYWORDS]
    if words:
        names.add(words[-1])  # a variable's name (or the class's again)
    return names - {"void", "int", "float", "double", "char", "bool", "long", "short", "size_t"}


def split(cu: str) -> Split:
    """The device and host translation units of `cu` (see the module doc). Raises Unsplittable."""
    m = mask(cu)
    if _TORCH_DEVICE.search(m):
        raise Unsplittable("torch's host-and-device macros (C10_HOST_DEVICE, ...)")
    # the half types, which torch's headers bring to a whole .cu (c10/util/Half.h)
    device: list[str] = ["#include <cuda_fp16.h>", "#include <cuda_bf16.h>"]
    host: list[str] = ["#include <cuda_runtime.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>"]
    device_names: set[str] = set()  # what device-only code declares: the host code may not name it
    kernels: dict[str, _Kernel] = {}
    defined: set[str] = set()
    host_parts: list[tuple[int, int]] = []  # which host entries hold host code (launches rewritten)
    for it in items(m):
        src, mk = cu[it.start : it.end], m[it.start : it.end]
        if it.directive:
            d = re.match(r"#\s*(\w+)\s*(.*)", mk, re.S)
            word, rest = (d.group(1), d.group(2).strip()) if d else ("", "")
            if word == "include":
                header = re.match(r"<([^>]+)>", rest)
                if header is None:
                    raise Unsplittable("an include of a file other than a system header")
                if _TORCH_HEADER.match(header.group(1)):
                    host.append(src)
                elif _CUDA_LIBRARY_HEADER.match(header.group(1)):
                    device.append(src)
                else:
                    device.append(src)
                    host.append(src)
            elif word in ("define", "undef", "pragma"):
                if "<<<" in mk or _HOST_ONLY_NVCC.search(mk):
                    raise Unsplittable("a macro that launches or reads nvcc's macros")
                device.append(src)
                host.append(src)
            else:
                raise Unsplittable(f"a #{word or '?'} directive")
            continue
        if _GLOBAL.search(mk):
            if re.match(r"\s*template\b", mk):
                raise Unsplittable("a template kernel")
            if _TORCH.search(mk):
                raise Unsplittable("a kernel that names torch")
            k = _kernel(src, mk)
            if "{" in mk:
                if k.name in defined:
                    raise Unsplittable(f"two kernels named {k.name}")
                defined.add(k.name)
            device.append(src)
            if "{" in mk:
                device.append(_launcher(k))
            if k.name not in kernels:
                host.append(_launcher_struct(k))
            kernels[k.name] = k
        elif _DEVICE.search(mk) or _CUDA_NAMESPACE.match(mk):
            if _TORCH.search(mk):
                raise Unsplittable("device code that names torch")
            device.append(src)
            head = _head(mk)
            if re.search(r"\b__host__\b", head) and re.search(
                r"\b(?:inline|constexpr|static|template|__forceinline__)\b", head
            ):
                host.append(src)
            else:
                device_names |= _declared(mk)
        elif (
            not _TORCH.search(mk)
            and (_TYPE.match(_ATTRIBUTES.sub("", mk)) or _CONSTANT.match(mk))
            and "<<<" not in mk
        ):
            device.append(src)
            host.append(src)
        else:
            host_parts.append((len(host), it.start))
            host.append(src)
    for index, start in host_parts:
        src = host[index]
        mk = m[start : start + len(src)]
        if _HOST_ONLY_NVCC.search(mk):
            raise Unsplittable("host code that reads nvcc's macros (__CUDACC__, __CUDA_ARCH__, ...)")
        if _BARE_MIN_MAX.search(mk):
            raise Unsplittable("host code that calls min or max unqualified (nvcc's host pass declares them)")
        host[index] = _rewrite_launches(src, mk, kernels)
    if not defined:
        raise Unsplittable("no kernel defined")
    if set(kernels) - defined:
        raise Unsplittable("a kernel declared here but defined elsewhere")
    host_text = "\n".join(host) + "\n"
    named = set(_IDENT.findall(mask(host_text)))
    for name in kernels:
        if name in named:
            raise Unsplittable(f"kernel {name} is named outside a launch")
    # a name the host code sees without its device-only declaration means something else there, or
    # nothing: a specialization that changes a shared struct's layout, an overload that goes missing
    # (helper-33: a kernel argument of another size, a call of another overload, both compiled and linked)
    for name in sorted(device_names & named):
        raise Unsplittable(f"{name}, declared by device code, is named by host code")
    return Split("\n".join(device) + "\n", host_text, tuple(kernels))


# -- flags and the build file --------------------------------------------------------------------------
# nvcc options that concern device code only (with `=` or their value as the next word)
_DEVICE_ONLY = re.compile(
    r"^(?:-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code|--expt-relaxed-constexpr"
    r"|--expt-extended-lambda|--extended-lambda|-use_fast_math|--use_fast_math|-lineinfo|--generate-line-info"
    r"|-Xptxas|--ptxas-options|-maxrregcount|--maxrregcount|-ftz|--ftz|-prec-div|--prec-div|-prec-sqrt"
    r"|--prec-sqrt|-fmad|--fmad|-res-usage|--resource-usage|-Xcudafe|--diag-suppress|-diag-suppress"
    r"|--threads|-t|-Wno-deprecated-gpu-targets|-Xnvlink|--restrict|-restrict|--extra-device-vectorization"
    r"|-extra-device-vectorization|--keep|-keep|--source-in-ptx|-G|--device-debug|-dopt|--dopt"
    r"|--relocatable-device-code|-rdc|--use-local-env|-dlto|--dlink-time-opt|--display-error-number"
    r"|--no-host-device-initializer-list|--no-host-device-move-forward)(?:=.*)?$"
)
_WITH_VALUE = {"-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code", "-Xptxas",
               "--ptxas-options", "-maxrregcount", "--maxrregcount", "-Xcudafe", "--threads", "-t", "-Xnvlink",
               "-rdc", "--relocatable-device-code", "-ftz", "-prec-div", "-prec-sqrt", "-fmad", "--ftz",
               "--prec-div", "--prec-sqrt", "--fmad", "-dopt", "--dopt", "--diag-suppress", "-diag-suppress"}  # fmt: skip
_HOST = re.compile(r"^(?:-(?:[DUI]|isystem).+|-std=[\w+]+|-O[0-3s]?|-g|-w|-fPIC)$")


def host_flags(cuda_flags: list[str]) -> list[str]:
    """The g++ flags that give the host unit what nvcc gave the `.cu`'s host code, from the `.cu`'s nvcc
    flags (`cuda_cflags` and `cuda_post_cflags` of torch's build file, words as shlex splits them):
    `-D`, `-U`, `-I`, `-isystem`, `-std`, `-O`, `-g`, `-w` and the `-Xcompiler` options; device-only
    options are left out. Raises Unsplittable for an option this module does not know (`-ccbin`,
    `--default-stream`, ...): nvcc may pass it on to the host compiler."""
    out, it = ["-fPIC"], iter(cuda_flags)
    for f in it:
        if f in ("-Xcompiler", "--compiler-options"):
            out += [x for x in next(it, "").split(",") if x]
        elif f.startswith(("-Xcompiler=", "--compiler-options=")):
            out += [x for x in f.split("=", 1)[1].split(",") if x]
        elif f in ("-isystem", "-I", "-D", "-U"):
            out += [f, next(it, "")]
        elif _DEVICE_ONLY.match(f):
            if f in _WITH_VALUE:
                next(it, None)
        elif _HOST.match(f):
            out.append(f)
        else:
            raise Unsplittable(f"nvcc option {f!r}")
    return out


def _one_line(ninja: str, pattern: str) -> re.Match:
    hits = list(re.finditer(pattern, ninja, re.M))
    if len(hits) != 1:
        raise Unsplittable("torch's build file is not as this module expects")
    return hits[0]


def split_ninja(ninja: str, build_dir: os.PathLike | str) -> tuple[str, list[str]]:
    """torch's build file for main.cpp and cuda.cu, changed to build cuda.cu's two units
    (`DEVICE_FILE` with the `.cu`'s rule, `HOST_FILE` with g++ and `host_flags`) and link both in its
    place; and the host flags. Raises Unsplittable when the file is not as torch writes it."""
    edge = _one_line(ninja, rf"^build cuda\.cuda\.o: cuda_compile {re.escape(str(build_dir))}/cuda\.cu$")
    link = _one_line(ninja, r"^build \S+\.so: link .*$")
    if " cuda.cuda.o" not in link.group(0):
        raise Unsplittable("torch's build file does not link cuda.cuda.o")
    flags = []
    for var in ("cuda_cflags", "cuda_post_cflags"):
        line = _one_line(ninja, rf"^{var} = ?.*$").group(0)
        flags += shlex.split(line.split("=", 1)[1])
    host = host_flags(flags)
    rule = (f"rule {HOST_RULE}\n  command = $cxx -MMD -MF $out.d $kb_host_cflags -c $in -o $out\n"
            f"  depfile = $out.d\n  deps = gcc\n\n")  # fmt: skip
    edges = (f"build cuda_dev.cuda.o: cuda_compile {build_dir}/{DEVICE_FILE}\n"
             f"build cuda_host.o: {HOST_RULE} {build_dir}/{HOST_FILE}")  # fmt: skip
    new_link = link.group(0).replace(" cuda.cuda.o", " cuda_dev.cuda.o cuda_host.o", 1)
    out = ninja[: edge.start()] + edges + ninja[edge.end() : link.start()] + new_link + ninja[link.end() :]
    first_rule = out.index("\nrule ") + 1
    out = out[:first_rule] + f"kb_host_cflags = {shlex.join(host)}\n\n" + rule + out[first_rule:]
    return out, host


def unsplit_ninja(split: str, whole: str) -> str:
    """A split build file (`split_ninja`, perhaps changed since: the binding object's edge dropped, the
    precompiled header added) as it builds the `.cu` whole: its cuda edge as in `whole` (torch's build
    file before the split), its link line and rules as before the split."""
    edge = _one_line(whole, r"^build cuda\.cuda\.o: cuda_compile .*$").group(0)
    text = re.sub(r"^kb_host_cflags = .*\n\n", "", split, count=1, flags=re.M)
    text = re.sub(rf"^rule {HOST_RULE}\n(?:  .*\n)*\n", "", text, count=1, flags=re.M)
    text = re.sub(r"^build cuda_host\.o: .*\n", "", text, count=1, flags=re.M)
    text = re.sub(r"^build cuda_dev\.cuda\.o: .*$", lambda _: edge, text, count=1, flags=re.M)
    return re.sub(
        r"^(build \S+\.so: link .*) cuda_dev\.cuda\.o cuda_host\.o",
        r"\1 cuda.cuda.o",
        text,
        count=1,
        flags=re.M,
    )


def undefined_launchers(module: os.PathLike | str) -> list[str] | None:
    """The launchers (`LAUNCHER_PREFIX`) that the built module `module` (.so) uses but does not define,
    from `nm -D --undefined-only`: a host unit whose launcher declaration means other types than the
    device unit's definition (the module would fail at import). None where that cannot be read (no nm
    on the PATH, or nm failing): then the split module is not trusted."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    try:
        out = subprocess.run([nm, "-D", "--undefined-only", str(module)], capture_output=True, text=True,
                             check=False, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [ln.split()[-1] for ln in out.stdout.splitlines() if LAUNCHER_PREFIX in ln]
