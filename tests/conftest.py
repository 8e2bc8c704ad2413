"""Test-wide setup: offline, CPU-only, isolated.

TRITON_INTERPRET must be set before any module defining a @triton.jit kernel is imported, so it is set
here, at collection time. The local KernelBench copy in ../shared/kernelbench is used when present.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
SHARED_KB = ROOT.parent / "shared" / "kernelbench"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


if not _has_cuda():  # Triton kernels defined in this process run on CPU tensors only under the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def kb_dataset(monkeypatch) -> Path:
    """Point KB_DATASET at the local KernelBench copy, or skip when there is none."""
    path = Path(os.environ.get("KB_DATASET") or SHARED_KB)
    if not path.is_dir():
        pytest.skip("no local KernelBench copy (set KB_DATASET)")
    monkeypatch.setenv("KB_DATASET", str(path))
    return path


@pytest.fixture(autouse=True)
def _isolated_db(monkeypatch, tmp_path):
    """Every test gets its own trajectory store path."""
    monkeypatch.setenv("KB_DB", str(tmp_path / "kb.sqlite"))


@pytest.fixture
def fake_llm():
    """A scripted OpenAI/Anthropic-compatible server on 127.0.0.1 for one test: `fake_llm.add(...)`
    queues replies; `fake_llm.openai_base` / `fake_llm.anthropic_base` are the api_base values;
    `fake_llm.requests` records what clients sent."""
    from kb_agent.agent.fakeserver import FakeLLMServer

    with FakeLLMServer() as srv:
        yield srv


def pytest_sessionfinish(session, exitstatus):
    """Leave no evaluation work directory in the temp dir: those of harness processes the tests killed
    are swept (as the next evaluation would); one of this process's own is a leak and fails the run."""
    import tempfile

    from kb_agent.evaluator.workdir import PREFIXES, sweep_stale

    sweep_stale()
    own = [p for prefix in PREFIXES for p in Path(tempfile.gettempdir()).glob(f"{prefix}{os.getpid()}-*")]
    if own and session.exitstatus == 0:
        print(f"\nleft behind by an evaluation in this process: {', '.join(map(str, own))}")
        session.exitstatus = 1


SLOW_HINT_S = 6.0  # a test not marked slow that takes longer is named at the end of the run
_unmarked_slow: list[tuple[float, str]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > SLOW_HINT_S and "slow" not in report.keywords:
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter):
    """Keep the default run quick: name the tests over SLOW_HINT_S that are not marked slow."""
    if _unmarked_slow:
        terminalreporter.section(f"over {SLOW_HINT_S:g} s and not marked slow (README: Tests)")
        for seconds, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(f"{seconds:6.1f}s {nodeid}")
