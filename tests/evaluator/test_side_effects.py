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
