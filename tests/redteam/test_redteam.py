"""Red-team candidates against the strict evaluator: each must get the verdict its header declares.

Every file in tests/redteam/candidates/ is an attack (or an honest control) with a header saying what a
trustworthy evaluator answers in strict mode (see tests/redteam/catalog.py). CPU candidates run here with
EvalSettings(device="cpu", strict=True) (Triton under the interpreter); GPU-only ones are marked `gpu`
and run with device cuda. A failing test here is a hole in the evaluator, not in the test: the message
says which rule the candidate got past. Print the whole picture with tests/bench/redteam_table.py.
"""

import importlib.util
import sys
from pathlib import Path

import pytest
from kb_agent.evaluator.sandbox import landlock_abi

HERE = Path(__file__).resolve().parent


def _load_catalog():
    name = "kb_redteam_catalog"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "catalog.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


catalog = _load_catalog()

CANDIDATES = catalog.all_candidates()


# Holes the evaluator does not close on this machine, each with the reason; they stay in the suite
# (xfail, not strict) so the day one is closed shows up as XPASS.
KNOWN_HOLES = {}
if landlock_abi() < 1:
    KNOWN_HOLES["side_write_native"] = (
        "file writes from native code (torch.save's C++ writer) bypass the Python audit hook; strict mode "
        "closes this with Landlock (evaluator/sandbox.py), which this kernel does not have"
    )


# The default run's cross-section, one cheap candidate for each of the most common threat classes (an
# honest control among them); every other candidate is `slow` (`pytest -m slow`, CI's second step).
DEFAULT_RUN = {
    "honest_triton_relu",
    "tamper_swap_reference_model",
    "notakernel_torch_op",
    "tolerance_nan",
    "side_subprocess",
    "fault_oom",
}


def _param(c):
    marks = []
    if c.name in KNOWN_HOLES:
        marks.append(pytest.mark.xfail(reason=KNOWN_HOLES[c.name], strict=False))
    if c.device == "gpu":
        marks.append(pytest.mark.gpu)
    if c.slow or c.name not in DEFAULT_RUN:
        marks.append(pytest.mark.slow)
    return pytest.param(c, id=c.name, marks=marks)


def test_the_evaluator_has_a_strict_mode():
    # a failure, not a skip: without strict mode there is nothing to hold the candidates against, and a
    # skipped module would hide every test below (tests/bench/redteam_table.py shows parity verdicts)
    assert catalog.has_strict(), "EvalSettings has no `strict` field: the strict evaluator is missing"


def test_every_candidate_has_a_complete_header():
    names = [c.name for c in CANDIDATES]
    assert len(names) == len(set(names))
    for c in CANDIDATES:
        assert c.name.split("_")[0] in (
            "honest",
            "stale",
            "timing",
            "cache",
            "tamper",
            "notakernel",
            "input",
            "tolerance",
            "side",
            "impossible",
            "fault",
        ), c.name
        assert 0 <= c.class_no <= 10, c.name
    assert DEFAULT_RUN <= set(names), DEFAULT_RUN - set(names)
    covered = {c.class_no for c in CANDIDATES}
    assert covered >= set(range(0, 11)), f"threat classes without a candidate: {set(range(11)) - covered}"


@pytest.mark.parametrize("cand", [_param(c) for c in CANDIDATES])
def test_strict_verdict(cand, monkeypatch):
    if cand.device == "gpu":
        device = "cuda"
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        device = "cpu"
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the child inherits it; also on a GPU machine
    o = catalog.run(cand, device, strict=True)
    why = "; ".join(o.problems)
    assert o.ok, (
        f"{cand.name} [{cand.cls}] got past the strict evaluator: {why}\n"
        f"  attack: {cand.attack}\n"
        f"  message: {o.message[:600]}\n"
        f"  strict: {str(o.strict_info)[:600]}"
    )
