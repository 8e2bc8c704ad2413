"""`solve` without --turns: 5, or as many turns as a built-in scripted model has replies (a new user's
`solve --model scripted/demo` under the default 5 turns ended `finished_with_errors`, blaming the provider)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kb_agent.agent.cli import default_turns

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "kb_agent.agent.cli"]


def test_a_built_in_script_sets_the_default_turns_and_other_models_get_five():
    replies = len(list((ROOT / "agent" / "scripted" / "demo").glob("*.md")))
    assert replies >= 2 and default_turns("scripted/demo") == replies
    assert default_turns("openai/gpt-4o") == 5 and default_turns("hosted_vllm/x") == 5
    assert default_turns("scripted/no-such-script") == 5  # refused later, with the list of scripts


@pytest.mark.slow
def test_solve_with_the_demo_script_and_no_turns_finishes_cleanly(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_API_BASE")) and k != "KB_DB"}
    r = subprocess.run([*CLI, "solve", "--problem", "toy/relu", "--model", "scripted/demo", "--device", "cpu",
                        "--db", str(tmp_path / "kb.sqlite")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "finished_with_errors" not in r.stdout + r.stderr and "model_error" not in r.stdout, r.stdout
    turns = [line for line in r.stdout.splitlines() if line.startswith("toy/relu sample 0 turn")]
    assert len(turns) == default_turns("scripted/demo"), r.stdout
