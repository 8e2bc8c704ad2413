"""The binding-object cache on a GPU (run on the H200 machine):

    pytest -q -s -m gpu tests/evaluator/test_bindcache_gpu.py

Two CUDA ReLU candidates with the same C++ declarations and different kernels, in a fresh build cache,
evaluated with default (strict) settings: the first compiles main.cpp itself, the harness publishes its
binding object, the second links that object (only its .cu compiles), builds faster, and both are correct.
The -s output gives both builds' seconds."""

from pathlib import Path

import pytest
from kb_agent.evaluator import EvalSettings, Status, bindcache, evaluate
from kb_agent.problems import resolve_one

pytestmark = pytest.mark.gpu

CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
FIRST = (CANDIDATES / "cuda_relu.py").read_text()  # one element per thread
BODY = "    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;"
SECOND = FIRST.replace(
    BODY, "    for (; i < n; i += blockDim.x * gridDim.x) y[i] = fmaxf(__ldg(x + i), 0.f);"
)


def _published(build_root: Path, root: Path, key16: str) -> None:
    """Publish what the first build left (the harness may have started a publisher of its own: then wait
    for it), and check an entry is there."""
    bindcache.publish(build_root, root, pch=False)
    for lock in (root / "locks").glob(f"{key16}*.lock"):
        bindcache.wait_for(root, lock.stem, 600)
    assert list((root / "objects").glob(f"{key16}*/main.o")), "no binding object was published"


def test_a_refinement_with_the_same_declarations_links_the_cached_binding_object(tmp_path, monkeypatch):
    from kb_agent.evaluator.runner import candidate_build_root, default_build_root

    monkeypatch.setenv("KB_BUILD_DIR", str(tmp_path / "kbbuild"))
    monkeypatch.setenv("KB_BINDING_PCH", "0")
    problem, settings = resolve_one("toy/relu"), EvalSettings()
    first, second = FIRST, SECOND
    assert first != second
    r1 = evaluate(problem, first, settings)
    assert r1.status == Status.CORRECT, r1.message
    b1 = r1.compile.builds[0]  # the build child's (a split evaluation's run child finds it built)
    assert b1["path"] == bindcache.OWN, b1
    _published(candidate_build_root(first), bindcache.cache_dir(default_build_root()), b1["binding_key"])

    r2 = evaluate(problem, second, settings)
    assert r2.status == Status.CORRECT, r2.message
    b2 = r2.compile.builds[0]
    print(f"\nfirst: build {b1['seconds']:.1f} s ({b1['path']}), stages {r1.stages}"
          f"\nsecond: build {b2['seconds']:.1f} s ({b2['path']}), stages {r2.stages}")  # fmt: skip
    assert b2["path"] == bindcache.CACHED and b2["binding_key"] == b1["binding_key"], b2
    # unless KB_NVCC_PARALLEL=0, both .cu compiled with nvcc's host and device front ends at once
    from kb_agent.evaluator import nvccpar

    want = ["parallel", "parallel"] if nvccpar.enabled() else [None, None]
    assert [(r or {}).get("path") for b in (b1, b2) for r in (b.get("nvcc") or [None])] == want, (b1, b2)
    assert b2["seconds"] < b1["seconds"], (b1, b2)
    assert r1.hardware.arch_list == "9.0a" or r1.hardware.compute_capability != "9.0"
