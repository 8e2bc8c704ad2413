"""The binding-object cache: a build whose `main.cpp` an earlier build already compiled links that
object instead of compiling it again, so a refinement turn that keeps its C++ declarations compiles only
its `.cu`.

`load_inline` writes two translation units: `main.cpp` (`#include <torch/extension.h>`, the candidate's
`cpp_sources`, and the pybind11 module it generates for `functions`) and `cuda.cu`; ninja compiles both and
links them. main.cpp is mostly torch's and pybind11's headers: 15-20 s of g++ on the H200 machine, 23.6 s
on a 2-core CPU machine (9.4 s there with the precompiled header below). g++ makes the same object from the
same text and flags, byte for byte (checked with and without the precompiled header), so an object is
keyed by what went into it (`binding_key`): main.cpp's exact text, the compile command as torch writes it
(compiler, flags, include paths; the extension's name set to a placeholder), torch's version and the
compiler's identity (its path and `-v` output). The module is then named after the key
(`module_name`), since the object defines its `PyInit_` function.

Trust. The object is linked into later candidates' modules, so no candidate may write it, and nothing an
evaluation child compiles is ever published: the child has already run its candidate's code when it
builds. A child that compiled main.cpp itself leaves a request (main.cpp's text and its flags) in its own
build folder; the harness (`publish`, once the child has ended) compiles main.cpp again in a process that
runs no candidate code, under the narrow sandbox (it writes only its staging folder and reads only the
system, Python and torch), from a source and flags that pass `refusal` (literal includes of relative
headers, no `asm`, flags from a short list and without paths), so the object depends on nothing but what
its key names. Entries appear whole (written in a staging folder, then renamed) and are read with their
SHA-256 checked against their entry.json, so a torn or altered object is rebuilt, never linked. Strict
mode's sandbox lets the child read the cache and write nothing in it (`worker.confine`). Without the
sandbox (parity mode, `sandbox=False`) a candidate can write anywhere, here as in any other candidate's
build folder.

Layout under `cache_dir(build_root)`:

    objects/<key>/main.o, entry.json     a binding object and its record (sha256, size, what the key hashed)
    pch/<key>/kb_torch_extension.h(.gch)  a precompiled torch/extension.h for one set of flags, entry.json
    locks/<key>.lock                      held (flock) by the publisher compiling <key>
    publish.log                           the publishers' and the header warmer's outcomes, a JSON line each
    staging/                              the publisher's work folders

A shortcut that cannot be taken (torch's internals not as expected, an option it does not cover) falls
back to the stock `load_inline` build; the build's record says which path built it and why
(`JitHook.record`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kb_agent.evaluator import nvccpar, splitcu

FORMAT = 1  # bump when a key's recipe or the layout changes
REQUEST = "kb_binding_request.json"  # what a child leaves in its build folder for the publisher
PLACEHOLDER = "kb_binding_placeholder"  # the extension name while the key is computed
PCH_HEADER = "kb_torch_extension.h"
WAIT_S = 60.0  # how long a build waits for a publisher already compiling its key (it would take as long)
MAX_PCH = 4  # precompiled headers kept (about 0.8 GB each for CPU torch's headers), the newest: WARM_CFLAGS and one more
MAX_OBJECTS = 1000  # binding objects kept (2-3 MB each), the newest
MAX_REQUEST_BYTES = 2 << 20
PUBLISH_TIMEOUT_S = 600.0

# the paths a build takes, as its record names them
CACHED = "cached_binding"  # main.o from the cache: only the other sources compiled, then the link
OWN = "own_binding"  # main.o compiled in this build (a request for the publisher left beside it)
STOCK = "stock"  # torch's load_inline as it is

_CFLAG = re.compile(
    r"-(?:O[0-3sgz]?|g[0-3]?|w|W(?![ap],)[\w=+.,-]*|f(?!plugin)[\w=+.,-]+|m[\w=+.,-]+|D[A-Za-z_]\w*(?:=[\w.+-]*)?|"
    r"U[A-Za-z_]\w*|std=[\w+]+|pthread|pedantic(?:-errors)?|ansi)"
)
_DIRECTIVE = re.compile(r"^\s*(?:#|%:)\s*(\w+)(.*)$")
_INCLUDES = {"include", "include_next", "import", "embed"}
_HEADER = re.compile(r'^(?:<([\w./+-]+)>|"([\w./+-]+)")$')


class ShortcutError(Exception):
    """The binding cache cannot serve this build; it is built by the stock `load_inline` instead."""


def cache_dir(build_cache_root: str | os.PathLike) -> Path:
    """The binding cache beside the candidates' build folders (`runner.default_build_root()`)."""
    return Path(build_cache_root) / "bindings"


def module_name(key: str) -> str:
    return f"kb_bind_{key[:20]}"


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@functools.lru_cache(maxsize=8)
def compiler_identity(cxx: str) -> str:
    """The compiler a ninja `cxx = ...` value names: its resolved path and `-v` output (version, target,
    configuration). Raises ShortcutError when it cannot be run."""
    argv = shlex.split(cxx)
    path = shutil.which(argv[0]) if argv else None
    if path is None:
        raise ShortcutError(f"compiler {cxx!r} not found")
    try:
        out = subprocess.run(
            [*argv, "-v"], capture_output=True, text=True, timeout=30, env={**os.environ, "LC_ALL": "C"}
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise ShortcutError(f"could not run {cxx} -v: {e}") from None
    return f"{os.path.realpath(path)}\n{out.stdout}{out.stderr}"


def _one(lines: list[str], prefix: str) -> str:
    hits = [ln for ln in lines if ln.startswith(prefix)]
    if len(hits) != 1:
        raise ShortcutError(f"torch's build.ninja has {len(hits)} '{prefix.strip()}' lines, not one")
    return hits[0]


def compile_spec(ninja: str) -> list[str]:
    """The lines of torch's build.ninja that decide how main.cpp compiles: `cxx`, `cflags`,
    `post_cflags` and the `compile` rule. Raises ShortcutError when they are not there as expected."""
    lines = ninja.splitlines()
    spec = [_one(lines, p) for p in ("cxx = ", "cflags = ", "post_cflags = ")]
    if f"-DTORCH_EXTENSION_NAME={PLACEHOLDER}" not in spec[1]:
        raise ShortcutError("torch's build.ninja does not define TORCH_EXTENSION_NAME in cflags")
    start = lines.index("rule compile") if "rule compile" in lines else -1
    if start < 0:
        raise ShortcutError("torch's build.ninja has no 'rule compile'")
    rule = [lines[start]]
    for ln in lines[start + 1 :]:
        if not ln.startswith("  "):
            break
        rule.append(ln)
    return spec + rule


def binding_key(main_cpp: str, spec: list[str]) -> str:
    """SHA-256 (hex) of what main.o is made of: main.cpp's text, the compile lines (`compile_spec`),
    torch's version and the compiler's identity."""
    import torch

    return _sha(json.dumps([FORMAT, main_cpp, spec, torch.__version__, compiler_identity(spec[0][6:])]))


def pch_key(spec: list[str]) -> str:
    """The precompiled header's key: main.cpp's compile lines without the extension's name."""
    import torch

    flags = [ln.replace(f"-DTORCH_EXTENSION_NAME={PLACEHOLDER}", "") for ln in spec]
    return _sha(json.dumps([FORMAT, "pch", flags, torch.__version__, compiler_identity(spec[0][6:])]))


def edges(ninja: str, build_dir: Path) -> tuple[str, str]:
    """torch's build line for main.o and its link line. Raises ShortcutError unless there is exactly one
    of each, main.o is built from `build_dir`/main.cpp and linked."""
    main = [ln for ln in ninja.splitlines() if re.match(r"build main\.o: compile ", ln)]
    link = [ln for ln in ninja.splitlines() if re.match(r"build \S+\.so: link ", ln)]
    if len(main) != 1 or len(link) != 1:
        raise ShortcutError("torch's build.ninja does not build main.o and one module as expected")
    if main[0] != f"build main.o: compile {build_dir / 'main.cpp'}" or "main.o" not in link[0].split()[3:]:
        raise ShortcutError("torch's build.ninja builds main.o from elsewhere or does not link it")
    return main[0], link[0]


def without_main_edge(ninja: str, build_dir: Path) -> str:
    """The build file with main.o a plain input (its build line dropped): ninja then links the object
    that is there instead of compiling main.cpp (an output without a log entry would be rebuilt)."""
    main, _ = edges(ninja, build_dir)
    return "\n".join(ln for ln in ninja.split("\n") if ln != main)


def with_pch(ninja: str, header: Path) -> str:
    """The build file with main.cpp compiled against a precompiled torch/extension.h (`post_cflags`;
    -Winvalid-pch: g++ says when it cannot use it, and then reads the headers)."""
    line = _one(ninja.splitlines(), "post_cflags = ")
    return ninja.replace(line, f"{line.rstrip()} -Winvalid-pch -include {shlex.quote(str(header))}", 1)


# -- reading the cache -------------------------------------------------------------------------------
def lookup(root: Path, key: str, main_cpp: str, spec: list[str]) -> tuple[bytes | None, str]:
    """The verified bytes of the binding object for `key`, or (None, why not). An entry whose record
    does not match the key, main.cpp or the compile lines, or whose object's size or SHA-256 differ from
    its record, is not used (the reason says so)."""
    d = root / "objects" / key
    try:
        entry = json.loads((d / "entry.json").read_text())
        data = (d / "main.o").read_bytes()
    except FileNotFoundError:
        failed = last_failed_publish(root, key)
        if failed:
            return (
                None,
                f"no binding object for these declarations: the harness's last publish of them failed ({failed})",
            )
        return None, "no binding object for these declarations yet"
    except (OSError, ValueError) as e:
        return None, f"the cached binding object could not be read ({type(e).__name__}: {e})"
    want = {"format": FORMAT, "key": key, "main_cpp_sha256": _sha(main_cpp), "spec": spec}
    bad = [k for k, v in want.items() if entry.get(k) != v]
    if not bad and (entry.get("size") != len(data) or entry.get("sha256") != _sha(data)):
        bad = ["sha256"]
    if bad:
        return None, f"the cached binding object failed its check ({', '.join(bad)} differ); compiled here"
    return data, ""


PUBLISH_LOG_TAIL = 256 * 1024  # bytes of publish.log read for a key's last outcome


def last_failed_publish(root: Path, key: str) -> str:
    """The end of the reason of `key`'s last publish in `root`/publish.log when that one failed, else "".
    (A publish that failed in silence left every later build of the same declarations compiling main.cpp
    again, and the build records said only that there was no object yet.)"""
    try:
        with open(root / "publish.log", "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - PUBLISH_LOG_TAIL))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        try:
            outcome = json.loads(line)
        except ValueError:
            continue
        if isinstance(outcome, dict) and outcome.get("key") == key:
            if outcome.get("status") != "failed":
                return ""
            return " ".join(str(outcome.get("reason") or "no reason").split())[-300:]
    return ""


def find_pch(root: Path, key: str) -> Path | None:
    """The precompiled header for `key` (its .h, with the .gch beside it), when one is whole."""
    d = root / "pch" / key
    try:
        entry = json.loads((d / "entry.json").read_text())
        ok = entry.get("format") == FORMAT and (d / f"{PCH_HEADER}.gch").stat().st_size == entry.get("size")
    except (OSError, ValueError):
        return None
    return d / PCH_HEADER if ok else None


def _lock_path(root: Path, key: str) -> Path:
    return root / "locks" / f"{key}.lock"


def in_flight(root: Path, key: str) -> bool:
    """Whether a publisher holds `key`'s lock (is compiling it now). Needs only read access."""
    try:
        fd = os.open(_lock_path(root, key), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def wait_for(root: Path, key: str, timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until no publisher holds `key`'s lock; True if it was released."""
    deadline = time.monotonic() + timeout_s
    while in_flight(root, key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# -- the build, inside the evaluation child ----------------------------------------------------------
_NEEDED = ("name", "sources", "extra_cflags", "extra_ldflags", "extra_include_paths", "build_directory",
           "verbose", "with_cuda", "is_python_module", "is_standalone")  # fmt: skip


class JitHook:
    """Stands in for torch's `cpp_extension._jit_compile` during one `load_inline` call (`hooked`), which
    has by then written main.cpp and cuda.cu exactly as it always does.

    `record` gets `path` (CACHED, OWN or STOCK), `reason` (why not CACHED; "" when it was),
    `binding_key` (the key's first 16 hex digits, when one was computed), `waited_s` (seconds it waited
    for a publisher compiling the key, when it did), `pch` (True: main.cpp compiled against the
    cached precompiled header) and `nvcc` (how each .cu compiled: `evaluator.nvccpar.records`)."""

    def __init__(self, ce, root: Path | None, record: dict, wait_s: float = WAIT_S):
        self.ce = ce
        self.original = ce._jit_compile
        self.root = root
        self.record = record
        self.wait_s = wait_s
        self.whole = ""  # the build file before the split (`_split`), to build the .cu whole again
        self.split_active = False

    def __call__(self, *args, **kwargs):
        try:
            a = inspect.signature(self.original).bind(*args, **kwargs)
            a.apply_defaults()
            a = a.arguments
            missing = [n for n in _NEEDED if n not in a]
            if missing:
                raise ShortcutError(f"torch's _jit_compile takes no {', '.join(missing)}")
            plan = self._plan(a)
        except (ShortcutError, OSError, ValueError, TypeError) as e:
            return self._stock(args, kwargs, str(e))
        try:
            return self._build(a, *plan, stock=lambda why: self._stock(args, kwargs, why))
        except (ShortcutError, OSError) as e:  # the cache's own trouble, never a compile error (RuntimeError)
            return self._stock(args, kwargs, f"the binding cache failed: {type(e).__name__}: {e}")

    def _stock(self, args, kwargs, why: str):
        self.record.update(path=STOCK, reason=why)
        return self.original(*args, **kwargs)

    def _plan(self, a: dict):
        """Checks the call and writes nothing but a scratch build file: (build dir, main.cpp text,
        build file text with the module's name, compile lines, key)."""
        if self.root is None:
            raise ShortcutError("no binding cache (reuse_builds off)")
        if not sys.platform.startswith("linux") or getattr(self.ce, "IS_HIP_EXTENSION", False):
            raise ShortcutError("the binding cache serves CUDA and C++ builds on Linux")
        if (
            not a["is_python_module"]
            or a["is_standalone"]
            or a.get("with_sycl")
            or a.get("extra_sycl_cflags")
        ):
            raise ShortcutError("not a Python module of C++/CUDA sources")
        if a["extra_include_paths"]:
            raise ShortcutError("extra_include_paths given (headers outside the sources)")
        build_dir = Path(a["build_directory"])
        sources = [Path(s) for s in a["sources"]]
        if not sources or sources[0] != build_dir / "main.cpp" or any(s.suffix != ".cu" for s in sources[1:]):
            raise ShortcutError("sources other than load_inline's main.cpp and cuda.cu")
        main_cpp = sources[0].read_text()
        flags = [str(f) for f in a["extra_cflags"] or []]
        why = refusal(main_cpp, flags)
        if why:
            raise ShortcutError(f"not cached: {why}")
        with_cuda = a["with_cuda"] if a["with_cuda"] is not None else any(s.suffix == ".cu" for s in sources)
        ninja = torch_ninja(self.ce, build_dir, [str(s) for s in sources], a, with_cuda)
        spec = compile_spec(ninja)
        edges(ninja, build_dir)
        key = binding_key(main_cpp, spec)
        self.record["binding_key"] = key[:16]
        ninja = ninja.replace(PLACEHOLDER, module_name(key))
        if with_cuda:  # the .cu's host and device front ends at once (evaluator.nvccpar)
            ninja = self._split(build_dir, nvccpar.through(ninja))
        return build_dir, main_cpp, ninja, spec, key, flags, with_cuda

    def _split(self, build_dir: Path, ninja: str) -> str:
        """The build file with cuda.cu built as its device and host units (`evaluator.splitcu`), or as it
        is where that does not apply (`record["split"]` says which, and why not)."""
        self.whole = ninja
        mark = build_dir / splitcu.FAILED_MARK
        try:
            if not splitcu.enabled():
                raise splitcu.Unsplittable("off (KB_SPLIT_CU=1 turns it on)")
            if mark.exists():  # the split build failed here before: the whole .cu is what built
                raise splitcu.Unsplittable(f"built whole before: {mark.read_text()[:300]}")
            parts = splitcu.split((build_dir / "cuda.cu").read_text())
            text, _ = splitcu.split_ninja(ninja, build_dir)
            _write(build_dir / splitcu.DEVICE_FILE, parts.device)
            _write(build_dir / splitcu.HOST_FILE, parts.host)
        except Exception as e:  # noqa: BLE001 - the split is a shortcut: anything amiss builds the .cu whole
            why = (
                str(e)
                if isinstance(e, splitcu.Unsplittable)
                else f"the split failed: {type(e).__name__}: {e}"
            )
            self.record["split"] = {"used": False, "reason": why}
            return ninja
        self.record["split"] = {"used": True, "kernels": list(parts.kernels)}
        self.split_active = True
        return text

    def _unsplit(self, build_dir: Path, why: str) -> None:
        """Build the .cu whole from now on (this build and every later one of this folder)."""
        self.split_active = False
        self.record["split"] = {"used": False, "reason": why}
        with contextlib.suppress(OSError):
            (build_dir / splitcu.FAILED_MARK).write_text(why)
        try:
            whole = splitcu.unsplit_ninja((build_dir / "build.ninja").read_text(), self.whole)
        except (splitcu.Unsplittable, OSError) as e:  # torch's own build, from the start (JitHook._stock)
            raise ShortcutError(f"{why}; and its build file could not be made whole again: {e}") from None
        _write(build_dir / "build.ninja", whole)

    def _build(self, a, build_dir, main_cpp, ninja, spec, key, flags, with_cuda, stock):
        root, name = self.root, module_name(key)
        data, why = lookup(root, key, main_cpp, spec)
        # a publisher compiling this key: wait for it, unless the module is built here already (a split
        # evaluation's run child after its build child)
        if data is None and not (build_dir / f"{name}.so").exists() and in_flight(root, key):
            others = _other_objects(ninja)  # compile them meanwhile: the wait is for main.o alone
            bg = _start_ninja(build_dir, ninja, others, a["verbose"]) if others else None
            t0 = time.perf_counter()
            waited = wait_for(root, key, self.wait_s)
            self.record["waited_s"] = round(time.perf_counter() - t0, 3)
            if bg is not None:
                bg.wait()
            data, why = lookup(root, key, main_cpp, spec)
            if data is None and not waited:
                why = f"a publisher was still compiling these declarations after {self.wait_s:.0f} s"
        if data is not None:
            try:
                _place(build_dir / "main.o", data)
                _write(build_dir / "build.ninja", without_main_edge(ninja, build_dir))
                self._ninja(build_dir, a, name)
            except RuntimeError as e:
                if f"FAILED: {name}.so" not in str(e):
                    raise  # another source's compile error: the candidate's, as in the stock build
                return stock(f"linking with the cached binding object failed: {str(e)[-300:]}")
            except OSError as e:
                return stock(f"the cached binding object could not be placed: {e}")
            self.record.update(path=CACHED, reason="")
        else:
            self._own(build_dir, a, name, ninja, spec, key)
            self.record.update(path=OWN, reason=why)
            write_request(build_dir, key, main_cpp, flags, with_cuda)
        nvcc = nvccpar.records(build_dir)
        if nvcc:
            self.record["nvcc"] = nvcc
        return self.ce._import_module_from_library(name, str(build_dir), True)

    def _own(self, build_dir: Path, a: dict, name: str, ninja: str, spec: list[str], key: str) -> None:
        """Compile main.cpp here too (against the cached precompiled header, when there is one, unless the
        module was built here without it: a split evaluation's run child, after a build child that ran
        before the header was ready, would otherwise compile main.cpp again, 7 s on the H200)."""
        header = find_pch(self.root, pch_key(spec))
        if header is not None and (build_dir / f"{name}.so").exists():
            with contextlib.suppress(OSError):
                if (build_dir / "build.ninja").read_text() == ninja:
                    header = None
        if header is not None:
            _write(build_dir / "build.ninja", with_pch(ninja, header))
            try:
                self._ninja(build_dir, a, name)
                self.record["pch"] = True
                return
            except RuntimeError as e:  # a header that went away, or a g++ that chokes on it: without
                if not re.search(
                    rf"internal compiler error|PCH file|{PCH_HEADER}(?:\.gch)?: No such file", str(e)
                ):
                    raise
        _write(build_dir / "build.ninja", ninja)
        self._ninja(build_dir, a, name)

    def _ninja(self, build_dir: Path, a: dict, name: str) -> None:
        """Run the build file; a split build that fails in one of the .cu's units or the link, or whose
        module leaves a launcher undefined, is built again with the .cu whole, whose outcome (its compile
        errors included) is the build's. A failure of main.o alone is the candidate's, split or not."""
        run = lambda: self.ce._run_ninja_build(  # noqa: E731
            str(build_dir), a["verbose"], error_prefix=f"Error building extension '{name}'"
        )
        if not self.split_active:
            return run()
        try:
            run()
        except RuntimeError as e:
            if not re.search(rf"FAILED: (?:cuda_host\.o|cuda_dev\.cuda\.o|{re.escape(name)}\.so)\b", str(e)):
                raise  # main.cpp's own error (the candidate's declarations), as in the whole build
            errors = [ln for ln in str(e).splitlines() if "error" in ln.lower()]
            self._unsplit(build_dir, f"the split build failed: {(errors or [str(e)])[0][:300]}")
            return run()
        missing = splitcu.undefined_launchers(build_dir / f"{name}.so")
        if missing is None or missing:
            self._unsplit(build_dir, f"the split module leaves {missing[0]} undefined" if missing else
                          "the split module's launchers could not be checked (nm)")  # fmt: skip
            run()


def torch_ninja(ce, build_dir: Path, sources: list[str], a: dict, with_cuda: bool) -> str:
    """The build file torch's `_write_ninja_file_to_build_library` writes for these arguments, with the
    extension named PLACEHOLDER (written to a scratch file in `build_dir` and read back)."""
    writer = ce._write_ninja_file_to_build_library
    scratch = build_dir / "build.ninja.kb"
    ldflags = _by_name(ce._prepare_ldflags, extra_ldflags=list(a["extra_ldflags"] or []), with_cuda=with_cuda,
                       with_sycl=False, verbose=a["verbose"], is_standalone=False)  # fmt: skip
    args = {"path": str(scratch), "name": PLACEHOLDER, "sources": sources,
            "extra_cflags": list(a["extra_cflags"] or []), "extra_cuda_cflags": list(a.get("extra_cuda_cflags") or []),
            "extra_sycl_cflags": [], "extra_ldflags": ldflags, "extra_include_paths": [], "with_cuda": with_cuda,
            "with_sycl": False, "is_standalone": False}  # fmt: skip
    scratch.unlink(missing_ok=True)
    _by_name(writer, **args)
    try:
        return scratch.read_text()
    finally:
        scratch.unlink(missing_ok=True)


def _by_name(fn, **values):
    """`fn` called with those of `values` it takes (torch's private functions gain parameters between
    versions); ShortcutError when it needs one that is not there."""
    params = inspect.signature(fn).parameters
    missing = [p for p, v in params.items() if p not in values and v.default is inspect.Parameter.empty]
    if missing:
        raise ShortcutError(f"torch's {fn.__name__} takes {', '.join(missing)}")
    return fn(**{k: v for k, v in values.items() if k in params})


def _other_objects(ninja: str) -> list[str]:
    return [
        m.group(1)
        for m in re.finditer(rf"^build (\S+): (?:cuda_compile|{splitcu.HOST_RULE}|compile) ", ninja, re.M)
        if m.group(1) != "main.o"
    ]


def _start_ninja(build_dir: Path, ninja: str, targets: list[str], verbose: bool) -> subprocess.Popen:
    _write(build_dir / "build.ninja", ninja)
    return subprocess.Popen(["ninja", *targets], cwd=build_dir, stdout=None if verbose else subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)  # fmt: skip


def _write(path: Path, text: str) -> None:
    """Write `text` unless the file already holds it (ninja goes by modification times)."""
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return
    path.write_text(text)


def _place(path: Path, data: bytes) -> None:
    """Put the verified object in the build folder, unless the same bytes are there (then the module is
    not linked again)."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


@contextlib.contextmanager
def hooked(ce, hook: JitHook | None):
    """torch's `_jit_compile` replaced by `hook` for the duration (nothing when `hook` is None)."""
    if hook is None:
        yield
        return
    ce._jit_compile = hook
    try:
        yield
    finally:
        ce._jit_compile = hook.original


# -- what may be published ---------------------------------------------------------------------------
def refusal(main_cpp: str, extra_cflags: list[str]) -> str:
    """Why this main.cpp and these flags may not be compiled for the cache ("" when they may): every
    include names a relative header literally (no `..`, no macro), there is no `asm` (`.incbin` reads
    any file), and each flag is an optimisation, warning, code-generation, define or standard option
    without a path (`_CFLAG`). Whatever passes compiles from torch's, Python's and the system's headers
    alone."""
    if len(main_cpp) > MAX_REQUEST_BYTES // 2:
        return "main.cpp is over 1 MiB"
    text = re.sub(r"\\\r?\n", "", main_cpp)  # line splices first, as the preprocessor does
    if re.search(r"\basm\b|__asm|incbin", text, re.IGNORECASE):
        return "main.cpp has inline assembly"
    for line in text.splitlines():
        m = _DIRECTIVE.match(re.sub(r"/\*.*?\*/", " ", line))
        if m and m.group(1) in _INCLUDES:
            operand = re.sub(r"//.*$", "", m.group(2)).strip()
            h = _HEADER.match(operand)
            header = h and (h.group(1) or h.group(2))
            if not header or header.startswith("/") or ".." in header.split("/"):
                return f"main.cpp includes {operand or '(nothing)'}: only relative headers by name are cached"
    # an empty flag ("") puts nothing on the command line
    bad = [f for f in extra_cflags if f.strip() and not _CFLAG.fullmatch(f.strip())]
    return f"extra_cflags {' '.join(bad)} are not among the flags the cache takes" if bad else ""


def write_request(build_dir: Path, key: str, main_cpp: str, extra_cflags: list[str], with_cuda: bool) -> None:
    """Leave what the publisher needs beside the build (the child's own folder)."""
    req = {
        "format": FORMAT,
        "key": key,
        "main_cpp": main_cpp,
        "extra_cflags": extra_cflags,
        "with_cuda": with_cuda,
    }
    tmp = build_dir / f".{REQUEST}.tmp"
    tmp.write_text(json.dumps(req))
    tmp.replace(build_dir / REQUEST)


# -- publishing, in the harness ----------------------------------------------------------------------
def pending(build_root: Path) -> list[Path]:
    """The requests the builds in one candidate's build folder left."""
    return sorted(Path(build_root).glob(f"*/{REQUEST}"))


def _read_request(path: Path) -> dict:
    """A request, read without following a link and at most MAX_REQUEST_BYTES; checked for shape.
    Raises ValueError or OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_REQUEST_BYTES + 1)
    if len(raw) > MAX_REQUEST_BYTES:
        raise ValueError("request too large")
    req = json.loads(raw)
    ok = (
        isinstance(req, dict)
        and req.get("format") == FORMAT
        and isinstance(req.get("key"), str)
        and re.fullmatch(r"[0-9a-f]{64}", req["key"])
        and isinstance(req.get("main_cpp"), str)
        and isinstance(req.get("extra_cflags"), list)
        and all(isinstance(f, str) for f in req["extra_cflags"])
        and isinstance(req.get("with_cuda"), bool)
    )
    if not ok:
        raise ValueError("malformed request")
    return req


def _clean_env() -> dict[str, str]:
    from kb_agent.evaluator.runner import SECRET_NAME

    env = {k: v for k, v in os.environ.items() if not SECRET_NAME.search(k)}
    for var in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
                "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES", "LD_PRELOAD"):  # fmt: skip
        env.pop(var, None)
    env["LC_ALL"] = "C"
    return env


def _sandboxed(
    staging: Path, argv: list[str], timeout_s: float, readable: list[Path] = ()
) -> subprocess.CompletedProcess:
    """Run `argv` in `staging` under the narrow sandbox (writes only there; reads the system, Python,
    torch and the `readable` folders), in a process of its own."""
    env = {**_clean_env(), "TMPDIR": str(staging / "tmp")}
    (staging / "tmp").mkdir(exist_ok=True)
    reads = [f"--read={p}" for p in readable]
    cmd = [sys.executable, "-m", "kb_agent.evaluator.bindcache", "run", str(staging), *reads, "--", *argv]
    return subprocess.run(cmd, cwd=staging, env=env, capture_output=True, text=True, timeout=timeout_s,
                          start_new_session=True)  # fmt: skip


def _run_main(staging: str, argv: list[str]) -> int:
    """`python -m kb_agent.evaluator.bindcache run STAGING [--read=DIR ...] -- CMD...`: CMD in STAGING,
    confined to writing there and reading the narrow profile's folders and each DIR (where Landlock is;
    else as it is: `refusal` already kept paths out)."""
    from kb_agent.evaluator.sandbox import SandboxUnavailable, restrict

    reads = []
    while argv and argv[0].startswith("--read="):
        reads.append(argv.pop(0).split("=", 1)[1])
    if argv and argv[0] == "--":
        argv = argv[1:]
    with contextlib.suppress(SandboxUnavailable):
        restrict([staging], "narrow", readable=reads)
    return subprocess.run(argv, cwd=staging).returncode


def _publish_dir(staging: Path, final: Path) -> None:
    """Rename a finished staging folder into place; one already there is replaced (it failed its check)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old.{secrets.token_hex(4)}")
        final.rename(old)
    staging.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def publish_request(path: Path, root: Path, timeout_s: float = PUBLISH_TIMEOUT_S, pch: bool = True) -> dict:
    """Compile one request's main.cpp for the cache (module doc, "Trust") and remove the request.

    Returns {"key", "status", "reason", "seconds"}: status "published", "exists" (a valid entry is
    there), "busy" (another publisher holds the key), "refused" (`refusal`, or a malformed request),
    "mismatch" (the key this process computes differs from the child's: another compiler or torch) or
    "failed" (the compile failed or ran past `timeout_s`)."""
    t0 = time.perf_counter()
    out = {"key": None, "status": "refused", "reason": "", "seconds": 0.0}
    try:
        req = _read_request(path)
    except (OSError, ValueError) as e:
        out["reason"] = f"unreadable request: {e}"
        path.unlink(missing_ok=True)
        return out
    out["key"] = claimed = req["key"]
    why = refusal(req["main_cpp"], req["extra_cflags"])
    if why:
        out["reason"] = why
        path.unlink(missing_ok=True)
        return out
    _make_dirs(root)
    lock = os.open(_lock_path(root, claimed), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.update(status="busy", reason="another publisher is compiling it")
            return out
        done = _compile_for_cache(req, root, timeout_s, pch)
        path.unlink(missing_ok=True)
    finally:
        os.close(lock)  # released before the precompiled header: builds waiting for the object go on
    pch_spec = done.pop("pch_for", None)
    out.update(done)
    if pch_spec is not None:
        out["pch_built"] = _build_pch(root, pch_spec, timeout_s)
    out["seconds"] = time.perf_counter() - t0
    return out


def _compile_for_cache(req: dict, root: Path, timeout_s: float, pch: bool) -> dict:
    import torch.utils.cpp_extension as ce

    staging = Path(_mkdtemp(root / "staging"))
    try:
        (staging / "main.cpp").write_text(req["main_cpp"])
        # main.cpp's compile reads no CUDA flag; one naming an architecture keeps torch from asking the
        # GPU for its own (it would start CUDA here)
        a = {"extra_cflags": req["extra_cflags"], "extra_cuda_cflags": ["-arch=unused"], "extra_ldflags": [],
             "verbose": False}  # fmt: skip
        ninja = torch_ninja(ce, staging, [str(staging / "main.cpp")], a, req["with_cuda"])
        spec = compile_spec(ninja)
        key = binding_key(req["main_cpp"], spec)
        if key != req["key"]:
            return {"status": "mismatch", "reason": "the harness's compiler or torch differ from the child's"}
        if lookup(root, key, req["main_cpp"], spec)[0] is not None:
            return {"status": "exists"}
        ninja = ninja.replace(PLACEHOLDER, module_name(key))
        header = find_pch(root, pch_key(spec)) if pch else None
        (staging / "build.ninja").write_text(with_pch(ninja, header) if header else ninja)
        # the precompiled header lives in the cache, which the narrow profile does not read: granted here
        # (without it g++ could not open it, every publish after the first header failed, and refinement
        # turns found no binding object: 2 hits of 10 on the H200, 2026-12-03)
        r = _sandboxed(staging, ["ninja", "-j1", "main.o"], timeout_s, [header.parent] if header else [])
        obj = staging / "main.o"
        if r.returncode != 0 or not obj.is_file():
            return {"status": "failed", "reason": (r.stdout + r.stderr)[-2000:]}
        data = obj.read_bytes()
        entry = {"format": FORMAT, "key": key, "sha256": _sha(data), "size": len(data),
                 "main_cpp_sha256": _sha(req["main_cpp"]), "spec": spec, "pch": header is not None,
                 "created": time.time()}  # fmt: skip
        final = staging / "entry"
        final.mkdir()
        (final / "main.o").write_bytes(data)
        (final / "entry.json").write_text(json.dumps(entry, indent=1))
        _publish_dir(final, root / "objects" / key)
        _prune(root / "objects", MAX_OBJECTS)
        return {"status": "published", "reason": "with the precompiled header" if header else "",
                "pch_for": spec if pch and header is None else None}  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"the compile ran past {timeout_s:.0f} s"}
    except ShortcutError as e:
        return {"status": "failed", "reason": str(e)}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _build_pch(root: Path, spec: list[str], timeout_s: float) -> bool:
    """Precompile torch/extension.h with main.cpp's flags (`pch_key`) into the cache, keeping the newest
    MAX_PCH. True when one was published."""
    key = pch_key(spec)
    _make_dirs(root)
    lock = os.open(_lock_path(root, "pch-" + key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    staging = Path(_mkdtemp(root / "staging"))
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if find_pch(root, key) is not None:
            return False
        d = staging / "pch"
        d.mkdir()
        (d / PCH_HEADER).write_text("#include <torch/extension.h>\n")
        cflags = spec[1][len("cflags = ") :].replace(f"-DTORCH_EXTENSION_NAME={PLACEHOLDER}", "")
        post = spec[2][len("post_cflags = ") :]
        argv = [*shlex.split(spec[0][6:]), *shlex.split(cflags), *shlex.split(post), "-x", "c++-header",
                f"pch/{PCH_HEADER}", "-o", f"pch/{PCH_HEADER}.gch"]  # fmt: skip
        r = _sandboxed(staging, argv, timeout_s)
        gch = d / f"{PCH_HEADER}.gch"
        if r.returncode != 0 or not gch.is_file():
            return False
        (d / "entry.json").write_text(json.dumps({"format": FORMAT, "key": key, "size": gch.stat().st_size,
                                                  "spec": spec, "created": time.time()}))  # fmt: skip
        _publish_dir(d, root / "pch" / key)
        _prune(root / "pch", MAX_PCH)
        return True
    except (subprocess.TimeoutExpired, OSError):
        return False
    finally:
        os.close(lock)
        shutil.rmtree(staging, ignore_errors=True)


# the extra_cflags whose precompiled header `warm_pch` makes ahead of the first candidate, in this order:
# none (torch's default, and what a candidate that passes no extra_cflags gets), [""] (KernelBench's
# prompt example passes extra_cflags=[""], which models copy) and ["-O3"]; as many as MAX_PCH keeps
WARM_CFLAGS: tuple[tuple[str, ...], ...] = ((), ("",), ("-O3",))


def default_spec(extra_cflags: tuple[str, ...] | list[str] = (), with_cuda: bool = True) -> list[str]:
    """`compile_spec` of the main.cpp of a `load_inline` call with these extra_cflags and torch's defaults
    otherwise (its cuda_sources given: `with_cuda`). Raises ShortcutError as `compile_spec` does."""
    import tempfile

    import torch.utils.cpp_extension as ce

    with tempfile.TemporaryDirectory(prefix="kb-spec-") as d:
        a = {"extra_cflags": list(extra_cflags), "extra_cuda_cflags": ["-arch=unused"], "extra_ldflags": [],
             "verbose": False}  # fmt: skip
        return compile_spec(torch_ninja(ce, Path(d), [str(Path(d) / "main.cpp")], a, with_cuda))


def warm_pch(root: str | os.PathLike, timeout_s: float = PUBLISH_TIMEOUT_S,
             cflag_sets: tuple[tuple[str, ...], ...] = WARM_CFLAGS, with_cuda: bool = True) -> list[dict]:  # fmt: skip
    """Precompile torch/extension.h for the usual flags (`WARM_CFLAGS`, candidates with CUDA sources:
    `with_cuda`) before any candidate needs it, so that the first builds of a fresh cache compile main.cpp
    against it too (on the H200, 2026-12-04: main.cpp without the header about 15 s, longer than the
    .cu's 9-10 s; with it, hidden behind the .cu). One outcome per set: {"extra_cflags", "status":
    "exists" | "built" | "busy or failed" | "no spec: WHY", "seconds"}."""
    root = Path(root)
    out = []
    for flags in cflag_sets:
        t0 = time.perf_counter()
        try:
            spec = default_spec(flags, with_cuda)
        except ShortcutError as e:
            out.append({"extra_cflags": list(flags), "status": f"no spec: {e}", "seconds": 0.0})
            continue
        if find_pch(root, pch_key(spec)) is not None:
            status = "exists"
        else:
            status = "built" if _build_pch(root, spec, timeout_s) else "busy or failed"
        out.append(
            {"extra_cflags": list(flags), "status": status, "seconds": round(time.perf_counter() - t0, 3)}
        )
    return out


def _warm_pch_main(root: str) -> int:
    """`python -m kb_agent.evaluator.bindcache warm-pch CACHE`: `warm_pch`, one JSON line per outcome;
    nothing where this torch has no CUDA (its candidates build no modules: CUDA sources are only checked
    with nvcc)."""
    import torch

    if torch.version.cuda is not None:
        for outcome in warm_pch(root):
            print(json.dumps({"warm_pch": outcome}), flush=True)
    return 0


_PCH_WARMER: list[subprocess.Popen] = []  # the one warmer this process started (`spawn_pch_warmer`)


def spawn_pch_warmer(root: str | os.PathLike) -> subprocess.Popen | None:
    """`warm_pch` in a process of its own session, not waited for, at most once per process; its
    outcomes go to `root`/publish.log. None when it was started before or when KB_BINDING_PCH=0."""
    if _PCH_WARMER or os.environ.get("KB_BINDING_PCH", "1") == "0":
        return None
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "publish.log", "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kb_agent.evaluator.bindcache", "warm-pch", str(root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=_clean_env(),
        )  # fmt: skip
    _PCH_WARMER.append(proc)
    return proc


def pch_warmer() -> subprocess.Popen | None:
    """The warmer `spawn_pch_warmer` started in this process, if any (a benchmark waits for it)."""
    return _PCH_WARMER[0] if _PCH_WARMER else None


def _make_dirs(root: Path) -> None:
    for sub in ("locks", "staging", "objects", "pch"):
        (root / sub).mkdir(parents=True, exist_ok=True)


def _prune(folder: Path, keep: int) -> None:
    """Remove all but the `keep` newest entries of `folder` (a build using one keeps its open files)."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) > keep:
        for old in sorted(entries, key=lambda p: p.stat().st_mtime, reverse=True)[keep:]:
            shutil.rmtree(old, ignore_errors=True)


def _mkdtemp(parent: Path) -> str:
    import tempfile

    parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(dir=parent)


def publish(build_root: str | os.PathLike, root: str | os.PathLike, timeout_s: float = PUBLISH_TIMEOUT_S,
            pch: bool = True) -> list[dict]:  # fmt: skip
    """Publish every request one candidate's build folder holds (`publish_request`), one after another.
    Call it from the harness once the evaluation's child has ended."""
    return [publish_request(p, Path(root), timeout_s, pch) for p in pending(Path(build_root))]


def spawn_publisher(build_root: str | os.PathLike, root: str | os.PathLike) -> subprocess.Popen | None:
    """`publish` in a process of its own session, not waited for (the next evaluation that needs the
    object waits on its lock instead); None when the folder holds no request. Its outcomes go to
    `root`/publish.log, one JSON line each. KB_BINDING_PCH=0 in the environment: no precompiled headers."""
    if not pending(Path(build_root)):
        return None
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "publish.log", "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kb_agent.evaluator.bindcache", "publish", str(build_root), str(root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=_clean_env(),
        )  # fmt: skip
    _PUBLISHERS[:] = [p for p in _PUBLISHERS if p.poll() is None] + [proc]
    return proc


_PUBLISHERS: list[subprocess.Popen] = []  # those `spawn_publisher` started in this process, still running


def wait_for_publishers(timeout_s: float) -> float:
    """Wait until the publishers and the header warmer this process started have ended, at most
    `timeout_s`; the seconds waited. (A benchmark's stand-in for the model's reply between two turns,
    during which they run.)"""
    t0 = time.perf_counter()
    for proc in [*_PUBLISHERS, *_PCH_WARMER]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, timeout_s - (time.perf_counter() - t0)))
    return time.perf_counter() - t0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "run":
        sys.exit(_run_main(sys.argv[2], sys.argv[3:]))
    if len(sys.argv) == 3 and sys.argv[1] == "warm-pch":
        sys.exit(_warm_pch_main(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "publish":
        for outcome in publish(sys.argv[2], sys.argv[3], pch=os.environ.get("KB_BINDING_PCH", "1") != "0"):
            print(json.dumps(outcome), flush=True)
        sys.exit(0)
    sys.exit(
        "usage: python -m kb_agent.evaluator.bindcache publish BUILD_ROOT CACHE | warm-pch CACHE"
        " | run STAGING [--read=DIR ...] -- CMD..."
    )
