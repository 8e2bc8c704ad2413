"""Building candidates: backend detection, the `load_inline` wrapper and compiler-error parsing.

Candidates build their own CUDA extensions by calling `torch.utils.cpp_extension.load_inline` at import
(the KernelBench contract). Inside the evaluator's child that function is wrapped so that every build:

* gets a unique extension name (the candidate's name plus a hash of its sources and flags), so two
  candidates never share a build and an identical source reuses its own earlier build;
* builds in the evaluator's build directory, never in the user's `~/.cache/torch_extensions`;
* compiles the CUDA half against `torch/types.h` (which load_inline puts first in every .cu anyway)
  instead of the `torch/extension.h` that candidates habitually include there: nvcc parses torch's
  headers three times (cudafe++, cicc, the host compiler), and extension.h doubles that work with
  pybind11, Python and the C++ frontend, which device code does not use. Measured on a 2-core machine:
  a one-kernel .cu builds in 36 s instead of 81 s. A build that then fails for want of a declaration is
  retried with the candidate's sources unchanged, so the contract is the same;
* builds with all cores (ninja), and without torch's precompiled header, which is machine-wide state
  that one interrupted or concurrent build can corrupt for every later one;
* reports the compiler's first errors, with the offending source line, instead of ninja's whole log.

On a machine whose torch has no CUDA (developers' CPU machines and CI), CUDA sources cannot be built into
a module; they are syntax-checked with `nvcc -ptx` instead (when nvcc is on the PATH), so a compile
error still comes back with its line.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import time
from pathlib import Path

MAX_ERRORS = 8

_ERROR_RE = re.compile(
    r"^(?P<file>[^\s:()]+?)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::\d+)?):\s*(?:fatal\s+)?error\b[:\s]*(?P<msg>.*)$"
)
_GENERIC_ERROR_RE = re.compile(r"\berror\b", re.IGNORECASE)


class BuildError(Exception):
    """A candidate's extension failed to compile. `errors` holds the first compiler errors."""

    def __init__(self, message: str, errors: list[str], log: str):
        super().__init__(message)
        self.errors = errors
        self.log = log


class CudaUnavailable(Exception):
    """CUDA sources passed a compile check, but this machine's torch cannot build or run them."""


def detect_backend(source: str) -> str:
    """ "cuda" if the source builds a C++/CUDA extension, "triton" if it defines Triton kernels, else "torch"."""
    if re.search(r"\bload_inline\b|\bcpp_extension\b|\bcuda_sources\b", source):
        return "cuda"
    if re.search(r"@\s*triton\.(jit|autotune|heuristics)\b|\bimport\s+triton\b|\bfrom\s+triton\b", source):
        return "triton"
    return "torch"


def parse_compiler_errors(log: str, build_dir: str | os.PathLike | None = None) -> list[str]:
    """The first compiler errors in a gcc/nvcc/ninja log, each with the offending source line when found.

    Returns entries like `cuda.cu(12): error: expected a ";"` followed by the source lines 11 and 12.
    """
    out: list[str] = []
    seen = set()
    for raw in log.splitlines():
        line = raw.strip()
        m = _ERROR_RE.match(line)
        if not m:
            continue
        file = os.path.basename(m.group("file"))
        lineno = int(m.group("l1") or m.group("l2"))
        key = (file, lineno, m.group("msg"))
        if key in seen:
            continue
        seen.add(key)
        entry = f"{file}({lineno}): error: {m.group('msg')}"
        if build_dir is not None:
            src = Path(build_dir) / file
            try:
                text = src.read_text().splitlines()
                for n in range(max(1, lineno - 1), min(lineno, len(text)) + 1):  # the line and the one before
                    entry += f"\n    {n:>4} | {text[n - 1].rstrip()}"
            except OSError:
                pass
        out.append(entry)
        if len(out) >= MAX_ERRORS:
            break
    if not out:  # linker errors and the like: keep the lines that say "error"
        out = [ln.strip() for ln in log.splitlines() if _GENERIC_ERROR_RE.search(ln)][:MAX_ERRORS]
    return out


def trim_log(log: str, max_chars: int = 6000) -> str:
    """Drop ninja's command echoes and keep the part of a build log around the first error."""
    lines = [
        ln
        for ln in log.splitlines()
        if not ln.startswith("[") and not re.match(r"^\S*(c\+\+|g\+\+|nvcc) ", ln)
    ]
    text = "\n".join(lines)
    first = re.search(r"error", text)
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


def _syntax_check(sources: list[str], cuda_sources: list[str], flags: dict, workdir: Path, arch: str) -> None:
    """Compile-check the sources without building a module (no CUDA torch). Raises BuildError."""
    import torch.utils.cpp_extension as ce

    includes = []
    hdr = os.environ.get("CUDA_HDR_DIR")  # optional: headers of a CUDA torch build (see README)
    if hdr:
        includes += [
            f"{hdr}/torch/include",
            f"{hdr}/torch/include/torch/csrc/api/include",
            f"{hdr}/nvidia/cu13/include",
        ]
    includes += ce.include_paths() + [sysconfig.get_paths()["include"]]
    includes += list(flags.get("extra_include_paths") or [])
    inc = [arg for p in includes for arg in ("-isystem", p)]
    defs = ["-DTORCH_EXTENSION_NAME=kb_check", "-DTORCH_API_INCLUDE_EXTENSION_H"]
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
        checks.append([nvcc, "-ptx", f"-arch=sm_{arch.replace('.', '')}", "-std=c++17", "--expt-relaxed-constexpr",
                       "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                       "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                       *defs, *inc, *(flags.get("extra_cuda_cflags") or []), str(cu), "-o", os.devnull])  # fmt: skip
    if sources:
        cpp = workdir / "main.cpp"
        cpp.write_text("\n".join(["#include <torch/extension.h>", *sources]))
        cxx = os.environ.get("CXX", "c++")
        checks.append(
            [cxx, "-fsyntax-only", "-std=c++17", *defs, *inc, *(flags.get("extra_cflags") or []), str(cpp)]
        )
    # one after the other, CUDA first (where the errors usually are): each takes 20-60 s, mostly parsing
    # torch's headers, and the first failure is all the feedback needs
    for cmd in checks:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workdir)
        if proc.returncode != 0:
            log = proc.stdout
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
                "the extension failed to compile", parse_compiler_errors(log, workdir), trim_log(log)
            )


_EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"][ \t]*$', re.MULTILINE)
# errors that can come from a header the light include does not bring in (then the build is retried as given)
_MISSING_DECL = re.compile(
    r"is undefined|has no member|not a member|was not declared|incomplete type|no instance of|pybind|"
    r"cannot open source file|No such file",
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


def light_first(cuda_sources: list[str], attempt):
    """`attempt(sources, light)` with the lightened CUDA sources first (`lighten_cuda_sources`), then with
    the sources as given when that failed for want of a declaration. A genuine error (one the candidate's
    own sources would hit too) is raised at once. Returns (attempt's result, whether the light one served)."""
    light = lighten_cuda_sources(cuda_sources) if cuda_sources else None
    if light is not None:
        try:
            return attempt(light, True), True
        except BuildError as e:
            if not any(_MISSING_DECL.search(err) for err in e.errors):
                raise
    return attempt(cuda_sources, False), False


class LoadInlineWrapper:
    """Replaces `torch.utils.cpp_extension.load_inline` inside the evaluator's child (see module doc).

    `builds` records each build: name, seconds, and whether it came from the cache.
    """

    def __init__(self, build_root: Path, arch: str, cuda_torch: bool, salt: str):
        import torch.utils.cpp_extension as ce

        self.ce = ce
        self.original = ce.load_inline
        self.build_root = build_root
        self.arch = arch
        self.cuda_torch = cuda_torch
        self.salt = salt
        self.builds: list[dict] = []
        self.monitor = None  # strict mode's SideEffectMonitor, paused while a build runs

    def install(self) -> None:
        self.ce.load_inline = self

    def __call__(self, name, cpp_sources, cuda_sources=None, *args, **kwargs):
        # the build is the evaluator's own work (compilers, torch's precompiled header beside its own
        # headers): strict mode's side-effect monitor watches the candidate, not this
        monitor, was_active = self.monitor, getattr(self.monitor, "active", False)
        if monitor is not None:
            monitor.active = False
        try:
            return self._call(name, cpp_sources, cuda_sources, *args, **kwargs)
        finally:
            if monitor is not None:
                monitor.active = was_active

    def _call(self, name, cpp_sources, cuda_sources=None, *args, **kwargs):
        as_list = lambda s: [s] if isinstance(s, str) else list(s or [])  # noqa: E731
        cpp, cu = as_list(cpp_sources), as_list(cuda_sources)
        flag_keys = ("functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")
        uname = f"{re.sub(r'[^A-Za-z0-9_]', '_', str(name))}_{_digest(self.salt, cpp, cu, [kwargs.get(k) for k in flag_keys], args)}"
        t0 = time.perf_counter()
        cached = any((self.build_root / uname).glob("*.so")) or any(
            (self.build_root / (uname + "_l")).glob("*.so")
        )
        if not self.cuda_torch and cu:
            check_dir = self.build_root / uname
            check_dir.mkdir(parents=True, exist_ok=True)
            light_first(cu, lambda sources, _: _syntax_check(cpp, sources, kwargs, check_dir, self.arch))
            raise CudaUnavailable(
                "this machine's torch has no CUDA: the CUDA sources passed an nvcc compile check "
                f"(sm_{self.arch.replace('.', '')}) but cannot be built into a module or run here"
            )
        kwargs["verbose"] = False
        # No precompiled header (load_inline's use_pch): torch keeps it beside its own headers, shared by
        # every build on the machine, and one interrupted or concurrent PCH build left a .gch that made
        # g++ crash ("internal compiler error: Segmentation fault") on every later build (seen on the H200).
        kwargs.setdefault("use_pch", False)
        module, light = light_first(
            cu,
            lambda sources, light: self._build(
                name, uname + ("_l" if light else ""), cpp, sources, args, kwargs
            ),
        )
        self.builds.append({"name": str(name), "seconds": time.perf_counter() - t0, "cached": cached,
                            "light_cuda_include": light})  # fmt: skip
        return module

    def _build(self, name, uname: str, cpp: list[str], cu: list[str], args, kwargs):
        import fcntl

        build_dir = self.build_root / uname
        build_dir.mkdir(parents=True, exist_ok=True)
        kwargs = {**kwargs, "build_directory": str(build_dir)}
        # Every build of this directory holds an flock on .kb_lock, which the kernel drops when its process
        # dies. Holding it, a `lock` file torch left in the directory is stale (a build killed at its stage
        # limit), and would make this build wait on it until its own limit: remove it.
        with open(build_dir / ".kb_lock", "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            (build_dir / "lock").unlink(missing_ok=True)
            try:
                return self.original(uname, cpp, cu, *args, **kwargs)
            except RuntimeError as e:
                log = str(e)
                if "Error building extension" in log or "error" in log.lower():
                    raise BuildError(
                        f"building extension {name!r} failed",
                        parse_compiler_errors(log, build_dir),
                        trim_log(log),
                    ) from None
                raise
