"""The binding-object cache (evaluator.bindcache): its key, the rewrite of torch's build file, entries
checked on read, what may be published, the fallback to the stock build, and (slow) cpp-only candidates
built through it end to end, sandboxed. The GPU case is tests/evaluator/test_bindcache_gpu.py."""

import fcntl
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from kb_agent.evaluator import bindcache
from kb_agent.evaluator.bindcache import (
    CACHED,
    OWN,
    PLACEHOLDER,
    STOCK,
    JitHook,
    ShortcutError,
    binding_key,
    compile_spec,
    edges,
    lookup,
    refusal,
    torch_ninja,
    with_pch,
    without_main_edge,
)

needs_toolchain = pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("c++") is None, reason="needs ninja and c++"
)
DECL = "#include <torch/extension.h>\ntorch::Tensor relu(torch::Tensor x);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}"


def _ninja(build_dir: Path, main_cpp: str = DECL, cflags=(), cuda: bool = False) -> str:
    import torch.utils.cpp_extension as ce

    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "main.cpp").write_text(main_cpp)
    sources = [str(build_dir / "main.cpp")] + ([str(build_dir / "cuda.cu")] if cuda else [])
    return torch_ninja(ce, build_dir, sources, {"extra_cflags": list(cflags), "extra_ldflags": [], "verbose": False},
                       with_cuda=False)  # fmt: skip


def _key(build_dir: Path, main_cpp: str = DECL, cflags=()) -> str:
    return binding_key(main_cpp, compile_spec(_ninja(build_dir, main_cpp, cflags)))


def _entry(root: Path, key: str, main_cpp: str, spec: list[str], data: bytes) -> Path:
    """An entry as the publisher leaves it."""
    d = root / "objects" / key
    d.mkdir(parents=True)
    (d / "main.o").write_bytes(data)
    entry = {"format": bindcache.FORMAT, "key": key, "sha256": bindcache._sha(data), "size": len(data),
             "main_cpp_sha256": bindcache._sha(main_cpp), "spec": spec}  # fmt: skip
    (d / "entry.json").write_text(json.dumps(entry))
    return d


def test_the_key_is_main_cpp_and_its_compile_command_not_the_build_folder(tmp_path):
    key = _key(tmp_path / "a")
    assert key == _key(tmp_path / "b")  # another candidate's folder, the same declarations
    assert key != _key(tmp_path / "c", DECL + "\n// changed")
    assert key != _key(tmp_path / "d", cflags=["-O3"])
    spec = compile_spec(_ninja(tmp_path / "a"))
    assert spec[0].startswith("cxx = ") and f"-DTORCH_EXTENSION_NAME={PLACEHOLDER}" in spec[1]
    assert spec[3] == "rule compile" and "$cflags" in spec[4]


def test_the_rewritten_build_file_links_main_o_as_a_plain_input(tmp_path):
    text = _ninja(tmp_path)
    main, link = edges(text, tmp_path)
    assert main == f"build main.o: compile {tmp_path / 'main.cpp'}"
    hit = without_main_edge(text, tmp_path)
    assert main not in hit and link in hit and "rule compile" in hit
    assert set(text.split("\n")) - set(hit.split("\n")) == {main}
    with pytest.raises(ShortcutError):  # torch's file for another folder: not what the hook expects
        edges(text, tmp_path / "elsewhere")
    pch = with_pch(text, Path("/cache/pch/k/kb_torch_extension.h"))
    assert "post_cflags = -Winvalid-pch -include /cache/pch/k/kb_torch_extension.h\n" in pch


def test_an_entry_is_used_only_when_its_object_matches_its_record(tmp_path):
    spec = compile_spec(_ninja(tmp_path / "b"))
    key = binding_key(DECL, spec)
    d = _entry(tmp_path / "cache", key, DECL, spec, b"\x7fELF object bytes")
    assert lookup(tmp_path / "cache", key, DECL, spec) == (b"\x7fELF object bytes", "")
    assert (
        lookup(tmp_path / "cache", key[::-1], DECL, spec)[1] == "no binding object for these declarations yet"
    )
    (d / "main.o").write_bytes(b"\x7fELF object bytez")  # one byte changed: same size, other hash
    data, why = lookup(tmp_path / "cache", key, DECL, spec)
    assert data is None and "failed its check (sha256 differ)" in why
    (d / "main.o").write_bytes(b"\x7fELF object bytes")
    assert lookup(tmp_path / "cache", key, DECL + " ", spec)[1].endswith(
        "(main_cpp_sha256 differ); compiled here"
    )
    (d / "entry.json").write_text("{")
    assert "could not be read" in lookup(tmp_path / "cache", key, DECL, spec)[1]


def test_a_held_publisher_lock_is_seen_with_read_access_only(tmp_path):
    root = tmp_path / "cache"
    (root / "locks").mkdir(parents=True)
    assert not bindcache.in_flight(root, "k")  # no lock file: nobody is compiling it
    fd = os.open(root / "locks" / "k.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.chmod(root / "locks" / "k.lock", 0o444)
    assert bindcache.in_flight(root, "k") and not bindcache.wait_for(root, "k", 0.2)
    os.close(fd)
    assert not bindcache.in_flight(root, "k") and bindcache.wait_for(root, "k", 0.2)


@pytest.mark.parametrize(
    "main_cpp,flags,why",
    [
        (DECL, ["-O3", "-DNDEBUG", "-Wall", "-std=c++20", "-march=native", "-fopenmp"], ""),
        (DECL, [""], ""),  # KernelBench-style candidates often pass extra_cflags=[""]
        ('#include "/etc/passwd"\n', [], 'includes "/etc/passwd"'),
        ('#include "../../other/evil.h"\n', [], "includes"),
        ('#inc\\\nlude "/abs.h"\n', [], 'includes "/abs.h"'),  # a line splice
        ("%:include </abs.h>\n", [], "includes </abs.h>"),  # a digraph
        ("# /* c */ include_next </abs.h>\n", [], "includes </abs.h>"),
        ("#define H </etc/hostname>\n#include H\n", [], "includes H"),
        ('asm(".incbin \\"/root/.ssh/id_rsa\\"");\n', [], "inline assembly"),
        ('__asm__(".inc" "bin x");\n', [], "inline assembly"),
        (DECL, ["-I/tmp/kb-eval-1/home"], "-I/tmp/kb-eval-1/home"),
        (DECL, ["-fplugin=evil"], "-fplugin=evil"),
        (DECL, ["-include", "x.h"], "-include x.h"),
        (DECL, ["-O3\nbuild evil: phony"], "build evil"),  # a newline would add lines to the build file
        (DECL, ["-Wa,-I/tmp"], "-Wa,-I/tmp"),
        (DECL, ["-fprofile-use=/tmp/p.gcda"], "-fprofile-use=/tmp/p.gcda"),
    ],
)
def test_what_may_be_compiled_for_the_cache(main_cpp, flags, why):
    got = refusal(main_cpp, flags)
    assert (why in got and got) if why else got == ""


def test_a_request_is_read_without_following_a_link(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"format": 1}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / bindcache.REQUEST).symlink_to(secret)
    out = bindcache.publish(tmp_path, tmp_path / "cache")
    assert [o["status"] for o in out] == ["refused"] and "unreadable request" in out[0]["reason"]
    assert not (tmp_path / "b" / bindcache.REQUEST).exists() and secret.exists()
    (tmp_path / "b" / bindcache.REQUEST).write_text(json.dumps({"format": 1, "key": "0" * 64, "main_cpp": "",
                                                               "extra_cflags": ["-I/x"], "with_cuda": False}))  # fmt: skip
    assert bindcache.publish(tmp_path, tmp_path / "cache")[0]["status"] == "refused"


class _FakeCE:
    """Just enough of torch.utils.cpp_extension for the hook to decide: a `_jit_compile` of another
    torch's signature."""

    def __init__(self):
        self.calls = []

    def _jit_compile(self, name, sources, some_new_option):
        self.calls.append(name)
        return "module built by the stock path"


def test_a_jit_compile_of_unexpected_shape_falls_back_to_the_stock_build_and_says_why():
    ce, record = _FakeCE(), {}
    hook = JitHook(ce, Path("/nonexistent"), record)
    assert hook("ext_1", ["main.cpp"], 1) == "module built by the stock path" and ce.calls == ["ext_1"]
    assert record["path"] == STOCK and "takes no extra_cflags" in record["reason"]


def test_a_build_with_extra_include_paths_takes_the_stock_path(tmp_path):
    import torch.utils.cpp_extension as ce

    record, calls = {}, []

    def original(name, sources, extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags,
                 extra_include_paths, build_directory, verbose, with_cuda, with_sycl, is_python_module,
                 is_standalone, keep_intermediates=True):  # fmt: skip
        calls.append(name)
        return "stock"

    hook = JitHook(ce, tmp_path / "cache", record)
    hook.original = original
    (tmp_path / "main.cpp").write_text(DECL)
    args = ("ext", [str(tmp_path / "main.cpp")], [], [], [], [], ["/usr/include/x"], str(tmp_path), False, None,
            None, True, False)  # fmt: skip
    assert hook(*args) == "stock" and record == {"path": STOCK, "reason": "extra_include_paths given (headers "
                                                 "outside the sources)"}  # fmt: skip


def test_a_build_is_cached_only_when_no_module_was_built_or_linked_now(tmp_path):
    """`cached` in a build's record: an earlier module there, and this call built none. The Nsight Compute
    pass's child once rebuilt by the stock path (another module name beside the evaluation's) and its
    record said cached, as any .so in the folder did."""
    import os

    from kb_agent.evaluator.build import LoadInlineWrapper

    w = LoadInlineWrapper(tmp_path, "9.0", cuda_torch=False, salt="s")
    built = []  # the module each call writes (None: nothing built)

    def original(name, cpp_sources, cuda_sources=None, build_directory=None, **kwargs):
        so = built.pop(0)
        if so:
            (Path(build_directory) / so).write_bytes(b"module")
            os.utime(Path(build_directory) / so, ns=(len(built) + 1, len(built) + 1))  # mtime: one per call
        return "module"

    w.original = original
    built.extend(["ext.so", None, "kb_bind_x.so", "ext.so"])
    for _ in range(4):
        w("ext", "torch::Tensor f(torch::Tensor x);")
    assert [b["cached"] for b in w.builds] == [False, True, False, False]  # built, cached, another, relinked


def test_the_binding_cache_is_readable_and_not_writable_in_the_sandbox(tmp_path):
    from kb_agent.evaluator.worker import confine

    if bindcache.os.uname().sysname != "Linux":
        pytest.skip("Landlock is Linux's")
    from kb_agent.evaluator.sandbox import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("no Landlock here")
    import subprocess
    import sys

    work, build = tmp_path / "work", tmp_path / "build" / "0123456789abcdef"
    work.mkdir()
    build.mkdir(parents=True)
    entry = tmp_path / "build" / "bindings" / "objects" / "k"
    entry.mkdir(parents=True)
    (entry / "main.o").write_text("object")
    job = {"workdir": str(work), "build_root": str(build), "sandbox_cache": str(tmp_path / "build"),
           "settings": {"strict": True, "device": "cpu"}}  # fmt: skip
    code = (
        "import json, sys\nfrom kb_agent.evaluator.worker import confine\n"
        f"print(json.dumps(confine(json.loads(sys.argv[1]))))\n"
        f"print(open({str(entry / 'main.o')!r}).read())\n"
        f"try:\n    open({str(entry / 'main.o')!r}, 'w')\nexcept PermissionError:\n    print('denied')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(job)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["object", "denied"]
    assert confine  # imported above: the child's own function


# -- builds (slow: each compile of main.cpp is 20-30 s of g++ on 2 cores) -----------------------------
# the C++ ReLU candidate with {body} for its forward's body (a str.format template)
CPP_RELU = (
    (Path(__file__).resolve().parent.parent / "candidates" / "cpp_relu.py")
    .read_text()
    .replace("{", "{{")
    .replace("}", "}}")
    .replace("return ext.relu(x.contiguous())", "{body}")
)


def _eval(src: str, strict: bool = True):
    from kb_agent.evaluator import EvalSettings, evaluate
    from kb_agent.problems import resolve_one

    return evaluate(resolve_one("toy/relu"), src, EvalSettings(device="cpu", strict=strict))


@pytest.mark.slow
@needs_toolchain
def test_a_cpp_candidate_links_the_cached_binding_object_and_a_corrupt_one_is_rebuilt(tmp_path, monkeypatch):
    """Four candidates with one main.cpp (cpp-only: main.cpp holds the whole extension) and different
    Python around it, in strict mode under the sandbox: the first compiles main.cpp and leaves a request;
    the harness publishes it while the second builds, which waits for it and links the object; the third
    links it at once; after the object is corrupted the fourth compiles main.cpp again (the reason says
    why) and the next publish replaces the entry."""
    from kb_agent.evaluator import Status
    from kb_agent.evaluator.runner import candidate_build_root, default_build_root

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "kbbuild"))
    root = bindcache.cache_dir(default_build_root())
    a = CPP_RELU.format(body="return ext.relu(x.contiguous())")
    r1 = _eval(a)
    assert r1.status == Status.CORRECT, r1.message
    (b1,) = r1.compile.builds
    assert b1["path"] == OWN and b1["reason"] == "no binding object for these declarations yet"
    assert bindcache.pending(candidate_build_root(a))
    # the harness publishes while the next candidate builds: that build waits for it, then links
    published = []
    publisher = threading.Thread(
        target=lambda: published.extend(bindcache.publish(candidate_build_root(a), root, pch=False))
    )
    publisher.start()
    b = CPP_RELU.format(body="y = ext.relu(x.contiguous())\n        return y")
    r2 = _eval(b)
    publisher.join()
    assert r2.status == Status.CORRECT, r2.message
    (pub,) = published
    assert pub["status"] == "published" and pub["key"][:16] == b1["binding_key"], pub
    assert not bindcache.pending(candidate_build_root(a))
    (b2,) = r2.compile.builds
    assert b2["path"] == CACHED and b2["reason"] == "" and b2["binding_key"] == b1["binding_key"], b2
    assert b2.get("waited_s", 0) > 0, b2  # the publisher held the key when the child looked
    assert not bindcache.pending(candidate_build_root(b))

    c = CPP_RELU.format(body="return ext.relu(x.contiguous().view_as(x))")
    r3 = _eval(c)
    assert r3.status == Status.CORRECT, r3.message
    (b3,) = r3.compile.builds
    assert b3["path"] == CACHED and "waited_s" not in b3 and b3["seconds"] < b1["seconds"] / 2, (b1, b3)
    print(f"\nown {b1['seconds']:.1f} s, publish {pub['seconds']:.1f} s, waited and linked {b2['seconds']:.1f} s, "
          f"cached {b3['seconds']:.1f} s")  # fmt: skip

    obj = root / "objects" / pub["key"] / "main.o"
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF
    obj.write_bytes(bytes(data))
    d = CPP_RELU.format(body="return ext.relu(x)")
    r4 = _eval(d)
    assert r4.status == Status.CORRECT, r4.message
    (b4,) = r4.compile.builds
    assert b4["path"] == OWN and "failed its check (sha256 differ)" in b4["reason"]
    (pub4,) = bindcache.publish(candidate_build_root(d), root, pch=False)
    assert pub4["status"] == "published"
    spec = json.loads((root / "objects" / pub["key"] / "entry.json").read_text())["spec"]
    main_cpp = (next(candidate_build_root(d).glob("relu_loop_cpp_*")) / "main.cpp").read_text()
    assert lookup(root, pub["key"], main_cpp, spec)[0] is not None


@pytest.mark.slow
@needs_toolchain
def test_a_refused_flag_builds_by_the_stock_path_and_the_record_says_why(tmp_path, monkeypatch):
    from kb_agent.evaluator import Status

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "kbbuild"))
    src = CPP_RELU.format(body="return ext.relu(x)").replace('["-O1"]', '["-O1", "-I."]')
    r = _eval(src, strict=False)
    assert r.status == Status.CORRECT, r.message
    (b,) = r.compile.builds
    assert (
        b["path"] == STOCK
        and b["reason"] == "not cached: extra_cflags -I. are not among the flags the cache takes"
    )


@pytest.mark.slow
@needs_toolchain
def test_an_own_build_compiles_main_cpp_against_the_cached_precompiled_header(tmp_path):
    """The publisher precompiles torch/extension.h for a set of flags (about 0.8 GB, 45 s of g++ here);
    a build of new declarations with those flags then compiles main.cpp against it, and is correct."""
    import torch
    import torch.utils.cpp_extension as ce
    from kb_agent.evaluator.build import LoadInlineWrapper

    root = tmp_path / "bindings"
    spec = compile_spec(_ninja(tmp_path / "spec", cflags=["-O1"]))
    assert bindcache.default_spec(["-O1"], with_cuda=False) == spec  # what warm_pch precompiles for

    def build(name: str, body: str = "x * 2"):
        w = LoadInlineWrapper(tmp_path / "cand", "9.0", cuda_torch=False, salt="s", bind_root=root)
        original = ce.load_inline
        w.install()
        try:
            ext = ce.load_inline(name, f"torch::Tensor twice(torch::Tensor x) {{ return {body}; }}",
                                 functions=["twice"], extra_cflags=["-O1"])  # fmt: skip
        finally:
            ce.load_inline = original
        return ext, w.builds[0]

    _, early = build("early_ext", "x + x")  # before the header: main.cpp compiled without it
    assert early["path"] == OWN and not early.get("pch") and not early["cached"], early
    (warmed,) = bindcache.warm_pch(root, 900.0, cflag_sets=(("-O1",),), with_cuda=False)
    assert warmed["status"] == "built", warmed
    assert bindcache.find_pch(root, bindcache.pch_key(spec)) is not None
    assert [o["status"] for o in bindcache.warm_pch(root, 900.0, (("-O1",),), with_cuda=False)] == ["exists"]
    # the module built before the header is loaded as it was built (a split evaluation's run child after
    # its build child): not compiled again against the header (seen on the H200: 7 s)
    _, again = build("early_ext", "x + x")
    assert again["cached"] and not again.get("pch"), again
    ext, b = build("pch_ext")
    assert b["path"] == OWN and b.get("pch") is True, b
    assert ext.twice(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
    # the harness publishes the build's main.cpp, compiled against the same header under the narrow
    # sandbox, which must let it read the header (it could not: every publish after the first header
    # failed, and refinement turns on the H200 found the binding object 2 times of 10)
    outcomes = {o["key"][:16]: o for o in bindcache.publish(tmp_path / "cand", root)}
    outcome = outcomes[b["binding_key"]]
    assert outcome["status"] == "published" and outcome["reason"] == "with the precompiled header", outcome


def test_the_header_warmer_starts_once_per_process_and_not_when_headers_are_off(tmp_path, monkeypatch):
    monkeypatch.setattr(bindcache, "_PCH_WARMER", [])
    monkeypatch.setenv("KB_BINDING_PCH", "0")
    assert bindcache.spawn_pch_warmer(tmp_path / "off") is None and bindcache.pch_warmer() is None
    monkeypatch.delenv("KB_BINDING_PCH")
    proc = bindcache.spawn_pch_warmer(tmp_path / "on")
    assert proc is not None and bindcache.pch_warmer() is proc
    assert bindcache.spawn_pch_warmer(tmp_path / "on") is None  # once per process
    assert proc.wait(timeout=120) == 0
    import torch

    log = (tmp_path / "on" / "publish.log").read_text()
    if torch.version.cuda is None:  # a CPU torch's candidates build no modules: nothing precompiled
        assert log == "" and not (tmp_path / "on" / "pch").exists()
    else:
        assert '"warm_pch"' in log


def test_the_default_spec_is_the_one_a_candidate_with_those_flags_gets(tmp_path):
    spec = compile_spec(_ninja(tmp_path / "spec", cflags=[""]))
    assert bindcache.default_spec([""], with_cuda=False) == spec
    assert bindcache.default_spec([], with_cuda=False) != spec  # extra_cflags=[""] is a key of its own


def test_a_build_record_says_when_the_last_publish_of_its_declarations_failed(tmp_path):
    root = tmp_path / "bindings"
    root.mkdir()
    key = "ab" * 32
    outcomes = [
        {
            "key": key,
            "status": "failed",
            "reason": "[1/1] c++ ... kb_torch_extension.h: Permission denied\nninja: stopped",
        },
        {"key": "cd" * 32, "status": "published", "reason": ""},
    ]
    (root / "publish.log").write_text("not json\n" + "\n".join(json.dumps(o) for o in outcomes) + "\n")
    data, why = bindcache.lookup(root, key, "main", ["spec"])
    assert data is None
    assert why.startswith(
        "no binding object for these declarations: the harness's last publish of them failed"
    )
    assert "Permission denied ninja: stopped" in why
    # a later success (or no outcome at all) is the plain reason
    with open(root / "publish.log", "a") as f:
        f.write(json.dumps({"key": key, "status": "published", "reason": ""}) + "\n")
    assert bindcache.lookup(root, key, "main", ["spec"])[1] == "no binding object for these declarations yet"
    assert (
        bindcache.lookup(root, "ef" * 32, "main", ["spec"])[1]
        == "no binding object for these declarations yet"
    )
