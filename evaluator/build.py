"""Building candidates: backend detection, the `load_inline` wrapper and compiler-error parsing.

Candidates build their own CUDA extensions by calling `torch.utils.cpp_extension.load_inline` at import
(the KernelBench contract). Inside the evaluator's child that function is wrapped so that every build:

* gets a unique extension name (the candidate's name plus a hash of its sources and flags), so two
  candidates never share a build and an identical source reuses its own earlier build;
* builds in the evaluator's build directory, never in the user's `~/.cache/torch_extensions`;
* compiles the CUDA half against a light torch/types.h where it serves (`evaluator.prelude`: the Tensor
  class, the dispatch macros and the operators the sources name, 18 s -> 8 s for a one-kernel .cu through
  nvccpar on a 2-core machine; first with slim operator headers, 11.8 s -> 6.6 s of nvcc), else against torch's `torch/types.h` (which load_inline puts first in every
  .cu anyway) instead of the `torch/extension.h` that candidates habitually include there: nvcc parses
  torch's headers three times (cudafe++, cicc, the host compiler), and extension.h doubles that work with
  pybind11, Python and the C++ frontend, which device code does not use (measured on a 2-core machine: a
  one-kernel .cu builds in 36 s instead of 81 s). A build that then fails for want of a declaration is
  retried with the next heavier header, and at last with the candidate's sources unchanged, so the
  contract is the same (`light_first`);
* builds with all cores (ninja), and without torch's precompiled header, which is machine-wide state
  that one interrupted or concurrent build can corrupt for every later one;
* builds for the evaluator's architecture (TORCH_CUDA_ARCH_LIST) also when one of the candidate's CUDA
  flags merely contains "arch" (`-Xcompiler -march=native`), for which torch drops its own
  (`arch_flags_for`); a candidate that names an architecture builds for that, as torch has it;
* links the binding object (`main.o`: torch's and pybind11's headers around the declarations) that the
  harness compiled into the binding cache from an earlier build's identical main.cpp, so only the .cu
  compiles (`evaluator.bindcache`; any trouble there and torch builds it as it always does);
* reports the compiler's first errors (nvcc, ptxas, cicc, g++, the linker, ninja), with the offending
  source line, instead of ninja's whole log or its command lines, and says when a compiler refused one of
  the candidate's own flags (`extra_cuda_cflags=["-arch=sm_70"]` under CUDA 13).

On a machine whose torch has no CUDA (developers' CPU machines and CI), CUDA sources cannot be built into
a module; they are checked with nvcc instead (when nvcc is on the PATH), the candidate's flags included, so
a compile error still comes back with its line.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
import time
from pathlib import Path

from kb_agent.evaluator import prelude

MAX_ERRORS = 8  # compiler errors kept in BuildError.errors, from the first

# a diagnostic with a place: nvcc's front end `cuda.cu(12): error: ...`, g++ `/build/main.cpp:3:5: error: ...`;
# the file's path may hold spaces and parentheses (a build folder under `/home/Jane Doe/` or `build (2)/`)
_ERROR_RE = re.compile(
    r"^(?P<file>[^\s:][^:]*?)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::\d+)?):\s*(?:fatal\s+|catastrophic\s+)?error\b[:\s]*"
    r"(?P<msg>.*)$"
)
# CUDA tools: `nvcc fatal   : Unsupported gpu architecture 'compute_70'`, `ptxas error   : Entry function ...`,
# `ptxas /tmp/x.ptx, line 27; error   : ...`, `nvlink error   : Undefined reference to ...`
_TOOL_RE = re.compile(
    r"^(?:\S*/)?(?P<tool>nvcc|ptxas|cicc|nvlink|fatbinary|cudafe\+\+|nvdisasm)\b[^:]*?(?:fatal|error)\s*:\s*(?P<msg>.*)$"
)
# the host compiler's driver and the linker: `c++: error: unrecognized command-line option ...`,
# `cc1plus: fatal error: ...`, `collect2: error: ld returned 1 exit status`; a wrapper's name too
# (`g++-12`, `g++-real`: the H200 image's g++ is a wrapper around `g++-real`)
_DRIVER_RE = re.compile(
    r"^(?:\S*/)?(?P<tool>(?:[\w.-]+-)?(?:c\+\+|g\+\+|gcc|cc|cc1plus|cc1|clang\+\+|clang|collect2)(?:-[\w.]+)?):\s*"
    r"(?:fatal\s+)?error:\s*(?P<msg>.*)$"
)
_LD_RE = re.compile(r"^(?:\S*/)?(?P<tool>ld(?:\.\w+)?|lld|mold):\s*(?P<msg>.*)$")
_UNDEFINED_RE = re.compile(
    r"^(?P<file>[^\s:]+):\((?:[^)]*)\):\s*(?P<msg>(?:undefined reference|multiple definition).*)$"
)
_OTHER_RE = re.compile(r"^(?:Command-line error|error|ninja: (?:error|fatal))\s*:\s*(?P<msg>.*)$")
_NOISE_RE = re.compile(
    r"^(?:\d+ (?:catastrophic )?errors? detected in|Compilation terminated\.|ninja: build stopped|"
    r"In file included from|\s*from |.*: In (?:member )?function|.*: note:|.*: warning:|.*\bwarning\b\s*:)"
)
_PROGRESS_RE = re.compile(r"^\[\d+/\d+\]\s")
_COMPILER_RE = re.compile(
    r"^(?:\S*/)?(?:ccache\s+)?(?:[\w.-]+-)?(?:nvcc|c\+\+|g\+\+|gcc|cc|clang\+\+|clang|ld|hipcc)(?:-[\w.]+)?\s"
)
_TORCH_PREFIX_RE = re.compile(r"^Error building extension '[^']*'(?::\s*)?")
_QUOTED_RE = re.compile(r"'([^'\s]+)'|‘([^’\s]+)’|\"([^\"\s]+)\"|`([^'\s]+)'")
_ARCH_OPTION_RE = re.compile(r"^-(?:arch|-gpu-architecture|gencode|-generate-code|code|-gpu-code)\b")
_ARCH_NAME_RE = re.compile(r"\b(?:sm|compute|lto)_(\d+[a-z]?)\b")
_FLAG_KEYS = ("extra_cuda_cflags", "extra_cflags", "extra_ldflags")
_TOOL_NAMES = {"collect2": "the linker", "cc1plus": "the host compiler", "cc1": "the host compiler"}


class BuildError(Exception):
    """A candidate's extension failed to compile or link.

    `errors` holds the first compiler errors (`parse_compiler_errors`: the compiler's own lines, the
    offending source lines, and which of the candidate's flags was refused, if one was); `log` the build
    log without command lines (`trim_log`)."""

    def __init__(self, message: str, errors: list[str], log: str):
        super().__init__(message)
        self.errors = errors
        self.log = log


class CudaUnavailable(Exception):
    """CUDA sources passed a compile check, but this machine's torch cannot build or run them."""


def detect_backend(source: str) -> str:
    """ "cuda" if the source builds a C++/CUDA extension, "triton" if it defines Triton kernels, else "torch",
    read from its code: its comments and string literals say nothing (helper-32: a Triton candidate
    commented "no load_inline needed" was taken for a CUDA one, and a Triton study rejected it)."""
    code = _python_code(source)
    if re.search(r"\bload_inline\b|\bcpp_extension\b|\bcuda_sources\b", code):
        return "cuda"
    if re.search(r"@\s*triton\.(jit|autotune|heuristics)\b|\bimport\s+triton\b|\bfrom\s+triton\b", code):
        return "triton"
    return "torch"


def _python_code(source: str) -> str:
    """`source` with its comments and string literals blanked (every other character where it was); the
    source itself where Python cannot tokenize it."""
    import io
    import tokenize

    blanked = {tokenize.COMMENT, tokenize.STRING}
    blanked |= {getattr(tokenize, n) for n in ("FSTRING_MIDDLE", "TSTRING_MIDDLE") if hasattr(tokenize, n)}
    lines = source.splitlines(keepends=True)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in blanked:
                continue
            (r0, c0), (r1, c1) = tok.start, tok.end
            for r in range(r0, r1 + 1):
                text = lines[r - 1]
                a, b = (c0 if r == r0 else 0), (c1 if r == r1 else len(text.rstrip("\r\n")))
                lines[r - 1] = text[:a] + " " * (b - a) + text[b:]
    except (tokenize.TokenError, SyntaxError, IndentationError, IndexError):
        return source
    return "".join(lines)


def _is_command(line: str) -> bool:
    """A compiler or linker command line (ninja echoes them), as opposed to what a compiler printed."""
    if _PROGRESS_RE.match(line):
        return True
    return bool(_COMPILER_RE.match(line)) and not (_TOOL_RE.match(line) or _DRIVER_RE.match(line))


def _short(text: str) -> str:
    """Absolute paths cut to their file name (build folders and temporary files say nothing to the model)."""
    return re.sub(r"(?<![\w.])/(?:[^\s/:'\"‘’`,;()]+/)+(?=[^\s/])", "", text)


def _flag_groups(flags: dict | None) -> list[tuple[str, str, list[str]]]:
    """The candidate's own flags as (keyword, flag as written, pieces to match a compiler's message against).
    An option and its separate value (`-arch sm_70`, `-Xptxas -v`) form one group."""
    groups = []
    for key in _FLAG_KEYS:
        items = [str(f).strip() for f in (flags or {}).get(key) or [] if str(f).strip()]
        i = 0
        while i < len(items):
            group = [items[i]]
            option_with_value = _ARCH_OPTION_RE.match(items[i]) or re.match(r"-X|--\w+-options$", items[i])
            if "=" not in items[i] and i + 1 < len(items) and (option_with_value or items[i + 1][0] != "-"):
                group.append(items[i + 1])
            i += len(group)
            pieces = set()
            for item in group:
                pieces |= {item, item.lstrip("-")} | {p for p in re.split(r"[=,\[\]\s]+", item) if p}
            groups.append((key, " ".join(group), sorted(pieces)))
    return groups


def blame_flag(diagnostic: str, tool: str, flags: dict | None, arch: str | None = None) -> str | None:
    """A line saying which of the candidate's own flags (`extra_cuda_cflags`, `extra_cflags`,
    `extra_ldflags` of its `load_inline` call) a compiler or linker diagnostic names, or None.

    `diagnostic` is the compiler's line (e.g. `nvcc fatal   : Unsupported gpu architecture 'compute_70'`),
    `tool` the program that printed it, `arch` the evaluator's compute capability ("9.0")."""
    groups = _flag_groups(flags)
    if not groups:
        return None
    who = _TOOL_NAMES.get(tool, "the linker" if tool.startswith("ld") else tool)
    arch_note = "drop it: the evaluator sets the architecture" + (
        f" (sm_{arch.replace('.', '')})" if arch else ""
    )
    unsupported = re.search(
        r"Unsupported gpu architecture '(\w+)'|Value '(\w+)' is not defined for option", diagnostic
    )
    if unsupported:
        m = _ARCH_NAME_RE.search(unsupported.group(1) or unsupported.group(2) or "")
        for key, shown, _ in groups:
            if m and key == "extra_cuda_cflags" and m.group(1) in _ARCH_NAME_RE.findall(shown):
                return f"{who} rejected {shown}, which the candidate passed in {key}; {arch_note}"
    lib = re.search(r"cannot find (-l\S+?)(?::|\s|$)", diagnostic)
    if lib:
        for key, _shown, pieces in groups:
            if lib.group(1) in pieces:
                return (f"{who} found no library {lib.group(1)}, which the candidate passed in {key}; drop it, "
                        "or link only libraries that torch and the CUDA toolkit provide")  # fmt: skip
    for m in _QUOTED_RE.finditer(diagnostic):
        token = next(g for g in m.groups() if g)
        if len(token.lstrip("-")) < 2:
            continue
        for key, shown, pieces in groups:
            if token in pieces or token.lstrip("-") in pieces:
                advice = arch_note if _ARCH_OPTION_RE.match(shown) else "drop or fix it"
                return f"{who} rejected {shown}, which the candidate passed in {key}; {advice}"
    return None


def _source_lines(build_dir, file: str, lineno: int) -> list[str]:
    """The offending line and the one before it, from the build folder's copy of the source."""
    if build_dir is None:
        return []
    try:
        text = (Path(build_dir) / file).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [
        f"    {n:>4} | {text[n - 1].rstrip()}" for n in range(max(1, lineno - 1), min(lineno, len(text)) + 1)
    ]


def parse_compiler_errors(
    log: str, build_dir: str | os.PathLike | None = None, flags: dict | None = None, arch: str | None = None
) -> list[str]:
    """The first errors in a build log (torch's "Error building extension" text around ninja's output, or
    one compiler's output), at most MAX_ERRORS, without command lines, progress lines or warnings.

    Understands nvcc's front end (`cuda.cu(12): error: ...`), g++ (`main.cpp:3:5: error: ...`), the CUDA
    tools (`nvcc fatal   : ...`, `ptxas error   : ...`, cicc, nvlink), the host compiler's driver
    (`c++: error: unrecognized command-line option ...`), the linker (`cannot find -lfoo`,
    `undefined reference to ...`, `collect2: error: ld returned 1 exit status`) and ninja (`FAILED:` blocks).
    An error with a place comes as `cuda.cu(12): error: expected a ";"` followed by source lines 11 and 12
    (read from `build_dir`, else as the compiler quoted them). When an error names one of the candidate's
    own flags (`flags`: the keyword arguments of its load_inline call), a line saying so follows it
    (`blame_flag`). A failed step whose output matches none of these gives its output lines as they are,
    and one that printed nothing says so. Returns [] only for a log without any output of a compiler.
    """
    lines = _TORCH_PREFIX_RE.sub("", log.strip("\n"), count=1).splitlines()
    out: list[str] = []
    seen: set[str] = set()
    blamed: set[str] = set()
    failed: list[tuple[str, list[str]]] = []  # ninja's failed steps: (target, the lines their tools printed)
    expect_command = False

    def add(entry: str, key: str, tool: str | None = None, diagnostic: str = "") -> None:
        if key in seen or len(out) >= MAX_ERRORS:
            return
        seen.add(key)
        note = blame_flag(diagnostic, tool, flags, arch) if tool else None
        if note and note not in blamed:
            blamed.add(note)
            entry += "\n    " + note
        out.append(entry)

    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("FAILED:"):
            failed.append((line[len("FAILED:") :].strip(), []))
            expect_command = True
            continue
        if expect_command or _is_command(line):  # the line after FAILED: is the failed command
            expect_command = False
            continue
        if failed and not _NOISE_RE.match(line) and not raw.startswith((" ", "\t")):
            failed[-1][1].append(line)
        if m := _ERROR_RE.match(line):
            file, lineno = os.path.basename(m.group("file")), int(m.group("l1") or m.group("l2"))
            context = _source_lines(build_dir, file, lineno)
            if not context:  # the compiler's own quote of the line (g++: `  4 |   code`, nvcc: indented)
                for nxt in lines[i + 1 : i + 4]:
                    if not nxt.strip() or not nxt.startswith((" ", "\t")):
                        break
                    context.append("    " + nxt.strip())
            msg = _short(m.group("msg"))
            add("\n".join([f"{file}({lineno}): error: {msg}", *context]), f"{file}:{lineno}:{msg}", "", line)
        elif m := _TOOL_RE.match(line) or _DRIVER_RE.match(line):
            add(_short(line), _short(line), m.group("tool"), line)
        elif m := _UNDEFINED_RE.match(line):
            where = re.match(r".*: in function (.*):$", lines[i - 1].strip()) if i else None
            entry = f"{os.path.basename(m.group('file'))}: {m.group('msg')}" + (
                f" (in function {where.group(1)})" if where else ""
            )
            add(entry, entry)
        elif (m := _LD_RE.match(line)) and not re.search(r": in function |: warning:", line):
            add(_short(line), _short(line), m.group("tool"), line)
        elif m := _OTHER_RE.match(line):
            add(_short(line), _short(line), "nvcc" if line.startswith("Command-line") else None, line)
    if out:
        return out
    # nothing recognisable: what the failed steps printed, as it is; a silent failure is named
    for target, printed in failed:
        if printed:
            out += [_short(p) for p in printed[: MAX_ERRORS - len(out)]]
        else:
            out.append(f"building {target} failed and its compiler printed nothing (killed, perhaps for "
                       "want of memory?)")  # fmt: skip
    if not out:
        rest = [ln.strip() for ln in lines if ln.strip() and not _is_command(ln.strip())]
        out = [_short(ln) for ln in rest if re.search(r"error|fatal", ln, re.IGNORECASE)] or rest[-3:]
    return out[:MAX_ERRORS]


def trim_log(log: str, max_chars: int = 6000) -> str:
    """The build log without torch's prefix and ninja's command echoes, from shortly before the first error."""
    lines = _TORCH_PREFIX_RE.sub("", log, count=1).splitlines()
    kept, after_failed = [], False
    for ln in lines:
        if after_failed or _is_command(ln.strip()):
            after_failed = False
            continue
        after_failed = ln.startswith("FAILED:")
        kept.append(ln)
    text = "\n".join(kept)
    first = re.search(r"error|fatal", text)
    if first and first.start() > max_chars // 4:
        text = "…\n" + text[max(0, first.start() - max_chars // 4) :]
    return text[:max_chars]


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def find_nvcc() -> str | None:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists():
        return str(Path(cuda_home) / "bin" / "nvcc")
    return shutil.which("nvcc")


_NOT_WITH_PTX = {"-dlto", "--dlink-time-opt", "-dc", "--device-c", "-dw", "--device-w", "-c", "--compile"}


def ptx_check_flags(cuda_flags: list[str], arch: str) -> list[str]:
    """The candidate's `extra_cuda_cflags` as the `nvcc -ptx` compile check can take them: its architecture
    options (several targets, which `-ptx` refuses, or one) replaced by one `-arch=sm_XX`, the one of its
    targets that is the evaluator's `arch` ("9.0") if named (`sm_90a` for 9.0), else its highest, else
    `arch`; and options that `-ptx` refuses (`-dlto`, `-dc`) dropped. The flags as given were validated
    before (`nvcc --dryrun`), so nothing here hides an error."""
    ours = arch.replace(".", "")
    kept, targets, i = [], [], 0
    items = [str(f) for f in cuda_flags]
    while i < len(items):
        item = items[i]
        if _ARCH_OPTION_RE.match(item):
            group = [item] if "=" in item or i + 1 >= len(items) else [item, items[i + 1]]
            targets += [t for g in group for t in _ARCH_NAME_RE.findall(g)]
            i += len(group)
            continue
        if item not in _NOT_WITH_PTX:
            kept.append(item)
        i += 1
    mine = [t for t in targets if re.fullmatch(ours + "[a-z]?", t)]
    pick = max(mine or targets or [ours], key=lambda t: (int(re.sub(r"\D", "", t)), t))
    return [f"-arch=sm_{pick}", *kept]


def _names_arch(cuda_flags: list[str]) -> bool:
    """Whether one of the candidate's `extra_cuda_cflags` names an architecture (`-arch`, `-gencode`,
    `--gpu-architecture`, `-code`, ...), a flag holding several options (`"-O3 -arch=sm_90"`) included."""
    return any(_ARCH_OPTION_RE.match(p) for f in cuda_flags for p in str(f).split())


def _torch_drops_arch(cuda_flags: list[str]) -> bool:
    """torch's rule (`cpp_extension._get_cuda_arch_flags`): it adds no `-gencode` of its own when any
    flag merely contains "arch" (`-Xcompiler -march=native` too)."""
    return any("arch" in str(f) and "TORCH_EXTENSION_NAME" not in str(f) for f in cuda_flags)


def evaluator_arch_kept(cuda_flags: list[str]) -> bool:
    """Whether the build compiles for the evaluator's architecture (TORCH_CUDA_ARCH_LIST) as well as for
    what the candidate's `extra_cuda_cflags` name: yes unless they name an architecture themselves, and
    torch then leaves its own out. A flag that only contains "arch" keeps it (`arch_flags_for`)."""
    return not (_torch_drops_arch(cuda_flags) and _names_arch(cuda_flags))


def arch_flags_for(cuda_flags: list[str], ours: list[str]) -> list[str]:
    """The candidate's `extra_cuda_cflags` as the build passes them to load_inline: as given, plus the
    evaluator's `ours` (`-gencode=arch=compute_90a,code=sm_90a`) where torch would drop its own for a
    flag that merely contains "arch" although none names an architecture (torch's substring test, which
    left such a build to nvcc's default architecture)."""
    flags = [str(f) for f in cuda_flags]
    if _torch_drops_arch(flags) and not _names_arch(flags):
        return flags + [f for f in ours if f not in flags]
    return flags


def _run_check(cmd: list[str], workdir: Path, flags: dict, arch: str) -> None:
    """Run one compile check; a failure raises BuildError (or CudaUnavailable for a header this machine lacks)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workdir)
    if proc.returncode == 0:
        return
    log = "\n".join(ln for ln in proc.stdout.splitlines() if not ln.startswith("#$ "))  # --dryrun's commands
    missing = re.search(
        r"fatal error: ([\w./+-]+): No such file|cannot open source file \"([\w./+-]+)\"", log
    )
    if missing:  # a header of the CUDA toolkit or a CUDA torch build that this machine lacks
        header = missing.group(1) or missing.group(2)
        raise CudaUnavailable(
            f"the nvcc compile check could not finish here: header {header} is not on this machine "
            "(set CUDA_HDR_DIR to the headers of a CUDA build of torch, see the README); the sources "
            "were not judged"
        )
    raise BuildError(
        "the extension failed to compile", parse_compiler_errors(log, workdir, flags, arch), trim_log(log)
    )


@functools.cache
def torch_cxx_std() -> str:
    """The `-std=` flag this torch's cpp_extension builds extensions with (`-std=c++20` in torch 2.13, for nvcc
    and the host compiler alike, `-std=c++17` in older ones), read from the function that writes its ninja
    file; `-std=c++17` where that cannot be read. The compile check uses it, so that a candidate load_inline
    builds (C++20's `consteval`, concepts, template lambdas) is not a compile error here."""
    import inspect

    import torch.utils.cpp_extension as ce

    try:
        text = inspect.getsource(ce._write_ninja_file_to_build_library)
    except (AttributeError, OSError, TypeError):
        text = ""
    found = re.findall(r"-std=(c\+\+\d+)", text)
    return f"-std={found[0]}" if found else "-std=c++17"


def torch_includes() -> list[str]:
    """The include folders of torch's headers (and Python's) that the compile check passes as `-isystem`,
    as torch's build passes them: `CUDA_HDR_DIR`'s first where set (the headers of a CUDA torch build, see
    README)."""
    import torch.utils.cpp_extension as ce

    includes = []
    hdr = os.environ.get("CUDA_HDR_DIR")
    if hdr:
        includes += [
            f"{hdr}/torch/include",
            f"{hdr}/torch/include/torch/csrc/api/include",
            f"{hdr}/nvidia/cu13/include",
        ]
    return includes + ce.include_paths() + [sysconfig.get_paths()["include"]]


def _syntax_check(
    sources: list[str], cuda_sources: list[str], flags: dict, workdir: Path, arch: str, include: str = "given"
) -> None:
    """Compile-check the sources without building a module (no CUDA torch). Raises BuildError.

    `flags` are the candidate's load_inline keyword arguments: its `extra_cuda_cflags` reach nvcc and its
    `extra_cflags` the host compiler, so a flag the real build refuses fails here too. The CUDA flags are
    first checked by `nvcc --dryrun -c` exactly as the real build passes them (with the evaluator's
    `-gencode` unless the candidate's flags name an architecture: `evaluator_arch_kept`; about 0.02 s),
    then the sources by `nvcc -ptx` (`ptx_check_flags`). `extra_ldflags` are not checked: nothing links.
    `include="prelude"` compiles the CUDA sources against the light torch/types.h, `"slim"` with the slim
    operator headers as well (`light_first`)."""
    includes = torch_includes() + list(flags.get("extra_include_paths") or [])
    inc = [arg for p in includes for arg in ("-isystem", p)]
    defs = ["-DTORCH_EXTENSION_NAME=kb_check", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    half = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
            "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]  # fmt: skip
    sm = arch.replace(".", "")
    std = torch_cxx_std()
    checks: list[list[str]] = []
    if cuda_sources:
        nvcc = find_nvcc()
        if nvcc is None:
            raise CudaUnavailable("no CUDA-enabled torch and no nvcc: the CUDA sources could not be checked")
        cu = workdir / "cuda.cu"
        cu.write_text(
            "\n".join(
                ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>", *cuda_sources]
            )
        )
        cuda_flags = [str(f).strip() for f in flags.get("extra_cuda_cflags") or []]
        if include in _LIGHT:
            prelude.write(workdir, cuda_sources, slim=include == "slim")
            cuda_flags.append(prelude.INCLUDE_FLAG)
        gencode = [f"-gencode=arch=compute_{sm},code=sm_{sm}"] if evaluator_arch_kept(cuda_flags) else []
        checks.append([nvcc, "--dryrun", *half, "--compiler-options", "-fPIC", *gencode, *cuda_flags,
                       std, "-c", str(cu), "-o", str(workdir / "cuda.o")])  # fmt: skip
        # -o a real file: `nvcc -ptx --threads N -o /dev/null` never returns (nvcc 13.0)
        checks.append([nvcc, "-ptx", std, *half, *defs, *inc, *ptx_check_flags(cuda_flags, arch),
                       str(cu), "-o", str(workdir / "cuda.ptx")])  # fmt: skip
    if sources:
        cpp = workdir / "main.cpp"
        cpp.write_text("\n".join(["#include <torch/extension.h>", *sources]))
        cxx = os.environ.get("CXX", "c++")
        checks.append([cxx, "-fsyntax-only", std, *defs, *inc, *(flags.get("extra_cflags") or []), str(cpp)])
    # one after the other, CUDA first (where the errors usually are): each takes 20-60 s, mostly parsing
    # torch's headers, and the first failure is all the feedback needs
    for cmd in checks:
        _run_check(cmd, workdir, flags, arch)


_EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"][ \t]*$', re.MULTILINE)
# errors that can come from a header the light include does not bring in (then the build is retried as given)
_MISSING_DECL = re.compile(
    r"is undefined|has no member|not a member|was not declared|incomplete type|no instance of|pybind|"
    r"no operator|no match for|must be a class or namespace|is not a class or namespace|has not been declared|"
    r"the global scope has no|cannot open source file|No such file|"
    # what a lighter header's lack can cause besides a missing name (a type left incomplete, overloads a
    # heavier header's declaration would hide or decide: `torch::cat({a, b})`, `torch::tensor({1, 2.5})`)
    r"incomplete class|type is incomplete|more than one instance|more than one operator|ambiguous|no suitable",
    re.IGNORECASE,
)


def lighten_cuda_sources(cuda_sources: list[str]) -> list[str] | None:
    """The CUDA sources with `#include <torch/extension.h>` dropped (load_inline already puts
    `#include <torch/types.h>` first), or None when there is nothing to drop or the sources use pybind11."""
    text = "\n".join(cuda_sources)
    if not _EXTENSION_INCLUDE.search(text) or re.search(r"pybind11|PYBIND11_|\bpy::", text):
        return None
    return [
        _EXTENSION_INCLUDE.sub("// kb-agent: torch/extension.h -> torch/types.h (prepended)", src)
        for src in cuda_sources
    ]


def _missing_declaration(error: BuildError) -> bool:
    """Whether a failed build's errors include one in a source for want of a declaration (not a flag's
    or the linker's: retrying those would repeat the failure, and on a GPU machine a whole build)."""
    return bool(_missing_declarations(error))


def _missing_declarations(error: BuildError) -> list[str]:
    """The first lines of a failed build's errors for want of a declaration (`_missing_declaration`)."""
    # the lines after an error's first quote the source
    firsts = [err.split("\n", 1)[0] for err in error.errors]
    return [first for first in firsts if _ERROR_RE.match(first) and _MISSING_DECL.search(first)]


# the name an error for want of a declaration says is missing, in nvcc's and g++'s wordings
_MISSING_NAME = re.compile(
    r'identifier "(?P<a>[^"]+)" is undefined|has no member "(?P<b>[^"]+)"|the global scope has no "(?P<c>[^"]+)"'
    r'|no instance of (?:overloaded )?function "(?P<d>[^"]+)"'
    r"|[\u2018'](?P<e>[^\u2019']+)[\u2019'] (?:was not declared|is not a member of|has not been declared|does not name a)"
)


def _missing_names(error: BuildError) -> list[str] | None:
    """The names that a failed build's errors for want of a declaration say are missing, each its last
    part (`getCurrentCUDAStream` of `at::cuda::getCurrentCUDAStream`); None when one of those errors names
    none this way (`no operator "+"`, `incomplete type`, `must be a class or namespace`)."""
    names = []
    for first in _missing_declarations(error):
        m = _MISSING_NAME.search(_ERROR_RE.match(first).group("msg"))
        name = next((g for g in m.groups() if g), "") if m else ""
        last = re.sub(r"<.*", "", name).split("::")[-1].strip()
        if not re.fullmatch(r"[A-Za-z_]\w*", last):
            return None
        names.append(last)
    return names


def _could_declare(error: BuildError, names) -> bool:
    """Whether headers whose names `names()` gives might declare what a failed build lacked: some missing
    name is among them, or the errors name none (`_missing_names`: then `names` is not called), or the
    names are unknown (None)."""
    missing = _missing_names(error)
    if missing is None:
        return True
    known = names()
    return known is None or any(n in known for n in missing)


def light_first(cuda_sources: list[str], attempt, headers: TorchHeaders | None = None):
    """`attempt(sources, include)` with the lightest CUDA sources first: the light torch/types.h with
    slim operator headers (`include="slim"`, `evaluator.prelude`) and then with torch's (`"prelude"`) where
    it applies, then torch's torch/types.h with the candidate's `#include <torch/extension.h>` dropped
    (`"types_h"`, `lighten_cuda_sources`), then the sources as given (`"given"`). Each next one only when
    the last failed for want of a declaration, or in any way at all when the sources spell a macro that
    only a heavier header defines (`TorchHeaders.spells_heavier_macro`: `#if TORCH_VERSION_MAJOR`,
    `PRId64`); the light one only when the names its operator headers add (`prelude.heavy_names`) might
    declare what the slim one lacked (`_could_declare`). A genuine error (one the candidate's own sources
    would hit too) is raised at once; so is one for want of a name that no torch header spells, where
    `headers` knows those names (`TorchHeaders.names`) and the sources spell no heavier macro: a typo, or
    `at::cuda::getCurrentCUDAStream` without its header, would fail every heavier try the same way (on the
    H200 some 40 s of builds). Returns (attempt's result, the `include` that served)."""
    if _defines_before_torch_include(cuda_sources):
        return attempt(cuda_sources, "given"), "given"
    lightened = lighten_cuda_sources(cuda_sources) if cuda_sources else None
    tries = []
    if cuda_sources and prelude.applies(lightened or cuda_sources):
        tries += [(lightened or cuda_sources, "slim"), (lightened or cuda_sources, "prelude")]
    if lightened is not None:
        tries.append((lightened, "types_h"))
    skip_light = False
    for sources, include in tries:
        if include == "prelude" and skip_light:
            continue
        try:
            return attempt(sources, include), include
        except BuildError as e:
            if include in _LIGHT and _light_header_failed(e):  # never the candidate's: the next one, always
                skip_light = False
                continue
            spelled = None if headers is None else headers.spells_heavier_macro(cuda_sources, include)
            if not (spelled or _missing_declaration(e)):
                raise
            if spelled is False and not _could_declare(e, headers.names):
                raise
            skip_light = include == "slim" and not spelled and not _could_declare(e, prelude.heavy_names)
    return attempt(cuda_sources, "given"), "given"


_DEFINE_OR_UNDEF = re.compile(r"^[ \t]*#[ \t]*(?:define|undef)\b", re.MULTILINE)
_TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:ATen|c10|torch|caffe2)/', re.MULTILINE)


def _defines_before_torch_include(cuda_sources: list[str]) -> bool:
    """Whether the sources define or undefine a macro before their last include of a torch header: with a
    lighter header, that header's own includes are read with the macro in force, which stock reads
    earlier, through the torch/types.h load_inline puts first (`#define N 1024` breaks c10's variadic.h
    in stock and not in a light build: found by a fresh helper). Such sources are built as given."""
    text = "\n".join(cuda_sources)
    starts = [m.start() for m in _TORCH_INCLUDE.finditer(text)]
    return bool(starts) and _DEFINE_OR_UNDEF.search(text, 0, starts[-1]) is not None


_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)


class TorchHeaders:
    """What `light_first` reads of torch's headers as this machine's `nvcc` preprocesses them for `arch`
    ("9.0") with torch's include folders (`prelude.preprocessed`, computed on a build's first failure, once
    per process). `early_end`: whether the candidate's CUDA flags leave torch's headers as read here
    (`_flags_leave_torch_as_is`); without it `names()` is None and no error ends the tries early."""

    def __init__(self, nvcc: str, arch: str, early_end: bool):
        self.nvcc, self.arch, self.early_end = nvcc, arch, early_end

    @functools.cached_property
    def args(self) -> tuple:
        """`prelude.preprocessed`'s first arguments; read only once a build failed."""
        return (self.nvcc, torch_cxx_std(), self.arch, tuple(torch_includes()))

    def names(self) -> frozenset[str] | None:
        """`prelude.whole_names`, or None (unknown, or no early end for these flags)."""
        return prelude.whole_names(*self.args) if self.early_end else None

    def spells_heavier_macro(self, cuda_sources: list[str], include: str) -> bool | None:
        """Whether the sources spell a macro that torch/extension.h defines and the header of `include`
        (the light base for "slim" and "prelude", torch/types.h for "types_h") does not; None when
        unknown."""
        text = "\n".join(cuda_sources)
        if "##" in text:  # a macro of its own may paste a heavier header's name together: unknowable here
            return True
        lighter = prelude.TYPES_H if include == "types_h" else prelude.LIGHT_BASE
        beyond = prelude.macros_beyond(*self.args, lighter)
        if beyond is None:
            return None
        code = _COMMENT_OR_STRING.sub(" ", text)  # `// TENSOR` is no use of ATen's TENSOR macro
        return not beyond.isdisjoint(re.findall(r"[A-Za-z_]\w*", code))


def torch_headers(flags: dict, arch: str) -> TorchHeaders | None:
    """`light_first`'s `headers` for a build with these load_inline keyword arguments for `arch`; None
    without nvcc."""
    nvcc = find_nvcc()
    return None if nvcc is None else TorchHeaders(nvcc, arch, _flags_leave_torch_as_is(flags))


# nvcc options that leave what torch's headers declare as it is (no macro, include folder, language
# standard, architecture other than the evaluator's or host-compiler option): only with these does
# light_first end its tries early
_NAME_NEUTRAL_FLAG = re.compile(
    r"|-O[0-3]?|--?use_fast_math"
    r"|--expt-relaxed-constexpr|--expt-extended-lambda|--extended-lambda|-lineinfo|--restrict|-w"
    r"|-Xptxas=[\w,=-]+|--ptxas-options=[\w,=-]+|--?maxrregcount=\d+|-ftz=(?:true|false)"
    r"|-prec-(?:div|sqrt)=(?:true|false)|-fmad=(?:true|false)|-res-usage|--resource-usage"
)


def _flags_leave_torch_as_is(flags: dict) -> bool:
    """Whether the candidate's CUDA flags leave torch's headers as `prelude.whole_names` reads them: no
    include folders of its own and only `_NAME_NEUTRAL_FLAG`s in `extra_cuda_cflags` (a `-D`, `-std=c++20`,
    `-arch=sm_100a` or `-Xcompiler -fopenmp` could declare names that nvcc -E without them does not spell:
    an architecture flag, even the evaluator's own, is left to the tries). Its
    `extra_cflags` reach main.cpp alone, which every try compiles the same way."""
    given = [str(f).strip() for f in (flags.get("extra_cuda_cflags") or [])]
    return not flags.get("extra_include_paths") and all(_NAME_NEUTRAL_FLAG.fullmatch(f) for f in given)


_LIGHT = ("slim", "prelude")  # the includes built against evaluator.prelude's header


def _light_header_failed(error: BuildError) -> bool:
    """Whether an error names the light header: its own trouble (torch's torch/types.h reached through
    another of torch's headers, redefining its aliases), never the candidate's."""
    return any(prelude.FOLDER in err for err in error.errors)


def _tries_on(include: str, error: BuildError) -> bool:
    """Whether `light_first` goes on to the next include after a build with `include` failed so."""
    return include != "given" and (
        (include in _LIGHT and _light_header_failed(error)) or _missing_declaration(error)
    )


# each try of light_first builds in a folder of its own, so that a module built one way is never taken for
# one built another way
_FOLDER_SUFFIX = {"slim": "_s", "prelude": "_p", "types_h": "_l", "given": ""}
# in a lighter try's folder: the errors it failed with (`LoadInlineWrapper._build`)
_FAILED = "kb_failed.json"


class LoadInlineWrapper:
    """Replaces `torch.utils.cpp_extension.load_inline` inside the evaluator's child (see module doc).

    `builds` records each build: name, seconds, whether it came from the cache (`cached`: an identical
    source built before, and no module built or linked now), and which path built it (`path`:
    "cached_binding", "own_binding" or "stock", see `evaluator.bindcache`) with the `reason` it was not
    the cached binding object, and `binding_key`.
    `bind_root` is the binding cache (`bindcache.cache_dir`), None for none.
    """

    def __init__(
        self, build_root: Path, arch: str, cuda_torch: bool, salt: str, bind_root: Path | None = None
    ):
        import torch.utils.cpp_extension as ce

        self.ce = ce
        self.original = ce.load_inline
        self.build_root = build_root
        self.arch = arch
        self.cuda_torch = cuda_torch
        self.salt = salt
        self.bind_root = bind_root
        self.builds: list[dict] = []
        self._path: dict = {}  # the last build's path record (bindcache.JitHook.record)
        self.probe = None  # strict mode's kernel_probe.KernelProbe: the built modules' functions report to it

    def install(self) -> None:
        self.ce.load_inline = self

    def __call__(self, name, cpp_sources, cuda_sources=None, *args, **kwargs):
        # the build is the evaluator's own work (compilers, torch's precompiled header beside its own
        # headers): strict mode's side-effect monitor lets the writes and processes under `_call` through
        # (`SideEffectMonitor.trusted_code`); nothing here can switch it off, which a candidate could reach
        return self._call(name, cpp_sources, cuda_sources, *args, **kwargs)

    def _call(self, name, cpp_sources, cuda_sources=None, *args, **kwargs):
        as_list = lambda s: [s] if isinstance(s, str) else list(s or [])  # noqa: E731
        cpp, cu = as_list(cpp_sources), as_list(cuda_sources)
        flag_keys = ("functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")
        uname = f"{re.sub(r'[^A-Za-z0-9_]', '_', str(name))}_{_digest(self.salt, cpp, cu, [kwargs.get(k) for k in flag_keys], args)}"
        t0 = time.perf_counter()
        modules = self._modules(uname)
        flags = self._flags(args, kwargs)
        headers = torch_headers(flags, self.arch) if cu else None
        if not self.cuda_torch and cu:
            check_dir = self.build_root / uname
            check_dir.mkdir(parents=True, exist_ok=True)
            light_first(
                cu,
                lambda sources, include: _syntax_check(cpp, sources, flags, check_dir, self.arch, include),
                headers,
            )
            raise CudaUnavailable(
                "this machine's torch has no CUDA: the CUDA sources passed an nvcc compile check "
                f"(sm_{self.arch.replace('.', '')}) but cannot be built into a module or run here"
            )
        kwargs["verbose"] = False
        # No precompiled header (load_inline's use_pch): torch keeps it beside its own headers, shared by
        # every build on the machine, and one interrupted or concurrent PCH build left a .gch that made
        # g++ crash ("internal compiler error: Segmentation fault") on every later build (seen on the H200).
        kwargs.setdefault("use_pch", False)
        if cu:
            args, kwargs = self._with_arch(args, kwargs)
        module, include = light_first(
            cu,
            lambda sources, include: self._build(name, uname, include, cpp, sources, args, kwargs, flags),
            headers,
        )
        # cached: a module was built before and none was built now (not one of another name, none relinked)
        cached = bool(modules) and self._modules(uname) == modules
        self.builds.append({"name": str(name), "seconds": time.perf_counter() - t0, "cached": cached,
                            "cuda_include": include, **self._path})  # fmt: skip
        if self.probe is not None:  # strict mode: each call of the module's functions is a custom launch
            from kb_agent.evaluator.kernel_probe import wrap_extension

            wrap_extension(module, self.probe, str(name))
        return module

    def _modules(self, uname: str) -> dict[str, int]:
        """The built modules (.so) of this call's build folders, each with its modification time (ns)."""
        found = {}
        for folder in (self.build_root / (uname + suffix) for suffix in _FOLDER_SUFFIX.values()):
            for so in folder.glob("*.so"):
                with contextlib.suppress(OSError):
                    found[str(so)] = so.stat().st_mtime_ns
        return found

    def _flags(self, args: tuple, kwargs: dict) -> dict:
        """The candidate's arguments after `cuda_sources` by name (`extra_cuda_cflags`, ...), positional
        ones included, as the wrapped load_inline's signature names them."""
        import inspect

        try:
            bound = inspect.signature(self.original).bind_partial("name", [], [], *args, **kwargs)
        except (TypeError, ValueError):  # a call load_inline itself refuses: it will say so
            return dict(kwargs)
        return dict(bound.arguments)

    def _with_arch(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arguments with `extra_cuda_cflags` as `arch_flags_for` makes them."""
        try:
            ours = self.ce._get_cuda_arch_flags()  # what TORCH_CUDA_ARCH_LIST gives (-gencode=...)
        except Exception:  # noqa: BLE001 - an arch list torch refuses: its own build will say so
            return args, kwargs
        return self._with_cuda_cflags(args, kwargs, lambda given: arch_flags_for(given, ours))

    def _with_cuda_cflags(self, args: tuple, kwargs: dict, change) -> tuple[tuple, dict]:
        """The call's arguments with `extra_cuda_cflags` replaced by `change(given flags)`, wherever the
        candidate passed them (by name or position); unchanged for a call load_inline itself refuses."""
        import inspect

        try:
            bound = inspect.signature(self.original).bind_partial("name", [], [], *args, **kwargs)
        except (TypeError, ValueError):  # a call load_inline itself refuses: it will say so
            return args, kwargs
        given = list(bound.arguments.get("extra_cuda_cflags") or [])
        fixed = change(given)
        if fixed == given:
            return args, kwargs
        bound.arguments["extra_cuda_cflags"] = fixed
        return bound.args[3:], bound.kwargs

    def _build(
        self, name, uname: str, include: str, cpp: list[str], cu: list[str], args, kwargs, flags: dict
    ):
        """One load_inline build of `cu` in its own folder (`uname` and the suffix of `include`, as
        `light_first` names it); for "slim" and "prelude" with the light torch/types.h first on nvcc's path."""
        import fcntl

        from kb_agent.evaluator.bindcache import JitHook, hooked

        uname += _FOLDER_SUFFIX[include]
        build_dir = self.build_root / uname
        build_dir.mkdir(parents=True, exist_ok=True)
        # a lighter try that failed in a way light_first goes on from fails so again (same sources, flags
        # and header): a split evaluation's run child, or an identical source later, does not build it again
        failed = build_dir / _FAILED
        if include != "given":
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                errors = [str(e) for e in json.loads(failed.read_text())["errors"]]
                raise BuildError(f"building extension {name!r} failed (as before, {_FAILED})", errors, "")
        if include in _LIGHT:
            prelude.write(build_dir, cu, slim=include == "slim")
            args, kwargs = self._with_cuda_cflags(args, kwargs, lambda given: [*given, prelude.INCLUDE_FLAG])
        kwargs = {**kwargs, "build_directory": str(build_dir)}
        # Every build of this directory holds an flock on .kb_lock, which the kernel drops when its process
        # dies. Holding it, a `lock` file torch left in the directory is stale (a build killed at its stage
        # limit), and would make this build wait on it until its own limit: remove it.
        with open(build_dir / ".kb_lock", "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            (build_dir / "lock").unlink(missing_ok=True)
            self._path = {}
            hook = JitHook(self.ce, self.bind_root, self._path)
            try:
                with hooked(self.ce, hook):
                    # copies: torch's load_inline adds its include and the pybind11 module to the lists it
                    # is given, and a second try (light_first) would then define the module twice
                    return self.original(uname, list(cpp), list(cu), *args, **kwargs)
            except RuntimeError as e:
                log = str(e)
                if "Error building extension" in log or "error" in log.lower():
                    err = BuildError(
                        f"building extension {name!r} failed",
                        parse_compiler_errors(log, build_dir, flags, self.arch),
                        trim_log(log),
                    )
                    if _tries_on(include, err):
                        tmp = failed.with_suffix(f".{os.getpid()}")
                        with contextlib.suppress(OSError):
                            tmp.write_text(json.dumps({"include": include, "errors": err.errors}))
                            tmp.replace(failed)
                    raise err from None
                raise
