"""Strict mode's audit hook (evaluator.strict.SideEffectMonitor) says what a candidate tried, and that
it was refused: a new-user pass read "wrote /path" for a write that never happened."""

from __future__ import annotations

import pytest
from kb_agent.evaluator.strict import SideEffectMonitor


def test_a_refused_write_is_recorded_as_tried_and_leaves_no_file(tmp_path):
    allowed, outside = tmp_path / "mine", tmp_path / "elsewhere.txt"
    allowed.mkdir()
    monitor = SideEffectMonitor([allowed])
    monitor.active = True
    try:
        with pytest.raises(PermissionError, match="not allowed for a candidate: tried to write"):
            monitor("open", (str(outside), "w", 0))
        monitor("open", (str(allowed / "ok.txt"), "w", 0))  # its own folder: allowed, nothing recorded
    finally:
        monitor.active = False
    assert monitor.events == [f"tried to write {outside}"] and not outside.exists()


def test_a_refused_process_and_network_use_read_as_tried(tmp_path):
    monitor = SideEffectMonitor([tmp_path])
    monitor.active = True
    for event, args in (("os.system", (b"true",)), ("socket.connect", (None, ("10.0.0.1", 80)))):
        with pytest.raises(PermissionError):
            monitor(event, args)
    monitor.active = False
    assert monitor.events == ["tried os.system", "tried to use the network (socket.connect)"]


def test_a_build_started_outside_load_inline_says_which_way_builds_go(tmp_path):
    # helper-32: torch.utils.cpp_extension.load (its ninja) was refused as "tried to start a process"
    monitor = SideEffectMonitor([tmp_path])
    monitor.active = True
    for exe in ("ninja", "/usr/bin/nvcc"):
        with pytest.raises(PermissionError):
            monitor("subprocess.Popen", (exe, [exe, "-v"], None, None))
    with pytest.raises(PermissionError):
        monitor("subprocess.Popen", ("sh", ["sh", "-c", "true"], None, None))
    monitor.active = False
    assert [e.split(":")[0] for e in monitor.events] == ["tried to start a process (ninja)",
                                                         "tried to start a process (/usr/bin/nvcc)",
                                                         "tried to start a process (sh)"]  # fmt: skip
    assert all("load_inline" in e for e in monitor.events[:2]) and "load_inline" not in monitor.events[2]


def _load(path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CANDIDATE = """
def compile_helper(monitor, filename):
    monitor("compile", ("def f(): pass", filename))


def unmarshal(monitor):
    monitor("marshal.loads", (b"",))


def read_frames(monitor):
    monitor("sys._getframe", (0,))
"""


def test_code_the_candidate_compiled_under_another_file_name_is_its_own(tmp_path):
    """helper-18 (2026-12-07): a helper compiled as "/opt/helper.py" read frames freely (the nearest caller
    outside the standard library was no file of the candidate's) and forged the timing record."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "candidate.py").write_text(CANDIDATE)
    cand = _load(tmp_path / "work" / "candidate.py", "kbtest_candidate")
    helper: dict = {}
    exec(compile(CANDIDATE, "/opt/helper.py", "exec"), helper)
    monitor = SideEffectMonitor([tmp_path / "work"], candidate_dir=tmp_path / "work")
    monitor.active = True
    try:
        helper["read_frames"](monitor)  # not the candidate's, as far as anyone can tell yet
        cand.compile_helper(monitor, "/opt/helper.py")
        with pytest.raises(PermissionError, match="inspect the interpreter"):
            helper["read_frames"](monitor)
        with pytest.raises(PermissionError, match="marshal.loads"):
            cand.unmarshal(monitor)
    finally:
        monitor.active = False
    assert monitor.named == {"/opt/helper.py"}


def test_a_module_the_candidate_wrote_into_its_build_folder_is_its_own(tmp_path):
    work, build = tmp_path / "work", tmp_path / "build"
    work.mkdir(), build.mkdir()
    (build / "planted.py").write_text(CANDIDATE)
    planted = _load(build / "planted.py", "kbtest_planted")
    monitor = SideEffectMonitor([work, build], candidate_dir=work)
    monitor.active = True
    try:
        with pytest.raises(PermissionError, match="inspect the interpreter"):
            planted.read_frames(monitor)
    finally:
        monitor.active = False


def _the_harness_build(monitor, path):
    monitor("open", (path, "w", 0))


def test_writes_under_the_harness_build_alone_are_let_through(tmp_path):
    """The build is let through by its code on the stack, not by a switch (the monitor used to be paused
    through an attribute of the load_inline wrapper, which any candidate can reach)."""
    monitor = SideEffectMonitor([tmp_path / "work"], trusted_code=(_the_harness_build.__code__,))
    monitor.active = True
    try:
        _the_harness_build(monitor, "/elsewhere/lib.so")
        with pytest.raises(PermissionError, match="tried to write /elsewhere/lib.so"):
            monitor("open", ("/elsewhere/lib.so", "w", 0))
    finally:
        monitor.active = False
    assert not hasattr(monitor, "paused")


def test_the_standard_librarys_own_caller_lookups_are_no_frame_reading(tmp_path):
    """helper-19 (2026-12-07): an honest kernel defining a namedtuple or a TypeVar at import was rejected,
    since both read their caller's module name through sys._getframe(1); `inspect` still may not."""
    import collections
    import inspect
    import typing

    (tmp_path / "candidate.py").write_text(
        "import collections, inspect, typing\n"
        "def define(monitor):\n"
        "    return collections.namedtuple('Launch', 'grid block'), typing.TypeVar('T')\n"
        "def frame(monitor):\n"
        "    return inspect.currentframe()\n"
    )
    cand = _load(tmp_path / "candidate.py", "kbtest_candidate_stdlib")
    monitor = SideEffectMonitor([tmp_path], candidate_dir=tmp_path)
    import sys

    sys.addaudithook(monitor)  # for good: an inactive monitor lets everything through
    monitor.active = True
    try:
        launch, _ = cand.define(monitor)
        with pytest.raises(PermissionError, match="inspect the interpreter"):
            cand.frame(monitor)
    finally:
        monitor.active = False
    assert launch.__module__ == "kbtest_candidate_stdlib" and collections and inspect and typing
