"""`check_problem` flags degenerate references (run on CPU with small references of our own)."""

import pytest
from kb_agent.evaluator import EvalSettings
from kb_agent.evaluator.runner import check_problem
from kb_agent.problems import resolve_one

TEMPLATE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.rand(64, 64)]


def get_init_inputs():
    return []
"""

SLOW = pytest.mark.slow  # one child per reference: the default run keeps a flagged one and a failing one


@pytest.mark.parametrize(
    "body, flags",
    [
        pytest.param("torch.relu(x)", [], marks=SLOW),
        pytest.param("self.drop(x)", ["nondeterministic"], marks=SLOW),  # default run: the report test
        ("torch.relu(x) * 1e-6", ["zeros_pass", "constant_pass"]),
        pytest.param("torch.full_like(x, 2.0) + x * 1e-7", ["constant_pass"], marks=SLOW),
        # the mean moves by ~0.005 between trials: no constant passes
        pytest.param("x.mean() + torch.zeros_like(x) + 2.0", [], marks=SLOW),
        pytest.param("x.sum()", [], marks=SLOW),  # a scalar output is not flagged by its own value
        ("x @ torch.ones(3, 3)", ["reference_fails"]),
        pytest.param(
            "x * float('nan')", ["nonfinite_output"], marks=SLOW
        ),  # not "nondeterministic": NaN matches NaN between runs
        # Inf where x <= 0.5: an equal Inf matches, so nothing to flag
        pytest.param("1.0 / (x > 0.5).float()", [], marks=SLOW),
    ],
)
def test_flags(tmp_path, body, flags):
    ref = tmp_path / "1_ref.py"
    ref.write_text(TEMPLATE.format(body=body))
    c = check_problem(resolve_one(str(ref)), EvalSettings(device="cpu"))
    assert c["flags"] == flags, c
    assert c["status"] == ("flagged" if flags else "ok")
    if "reference_fails" in flags:
        assert "RuntimeError" in c["reference_fails"] and "reference line" in c["reference_fails"]


def test_checks_are_stored_and_reported(tmp_path):
    from kb_agent.agent.report import build_report, render_report_text
    from kb_agent.agent.store import Store

    store = Store(tmp_path / "kb.sqlite")
    ref = tmp_path / "1_ref.py"
    ref.write_text(TEMPLATE.format(body="self.drop(x)"))
    p = resolve_one(str(ref))
    store.record_problem_check(check_problem(p, EvalSettings(device="cpu")))
    run = store.create_run("r", {}, "m", "triton", "fp32")
    traj = store.create_trajectory(run, p, 0)
    store.finish_trajectory(traj, "turn_budget")
    text = render_report_text(build_report(store, ["r"]))
    assert "1_ref nondeterministic" in text and "1 of 1 checked" in text


@pytest.mark.slow
def test_a_check_of_another_source_under_the_same_name_is_not_reported(tmp_path):
    from kb_agent.agent.report import build_report, render_report_text
    from kb_agent.agent.store import Store

    store = Store(tmp_path / "kb.sqlite")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    solved, other = tmp_path / "a" / "1_ref.py", tmp_path / "b" / "1_ref.py"
    solved.write_text(TEMPLATE.format(body="self.drop(x)"))
    other.write_text(TEMPLATE.format(body="torch.relu(x)"))  # same file name, another reference
    run = store.create_run("r", {}, "m", "triton", "fp32")
    store.finish_trajectory(store.create_trajectory(run, resolve_one(str(solved)), 0), "turn_budget")
    store.record_problem_check(check_problem(resolve_one(str(solved)), EvalSettings(device="cpu")))
    assert "1_ref nondeterministic" in render_report_text(build_report(store, ["r"]))
    store.record_problem_check(check_problem(resolve_one(str(other)), EvalSettings(device="cpu")))
    text = render_report_text(build_report(store, ["r"]))
    assert "0 of 1 checked" in text and "nondeterministic" not in text
