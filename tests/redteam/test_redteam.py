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

if not catalog.has_strict():
    pytest.skip(
        "EvalSettings has no `strict` field yet: the strict evaluator is not in this tree, so there is "
        "nothing to hold the red-team candidates against (tests/bench/redteam_table.py still shows the "
        "parity verdicts)",
        allow_module_level=True,
    )

CANDIDATES = catalog.all_candidates()


# Holes the evaluator does not close on this machine, each with the reason; they stay in the suite
# (xfail, not strict) so the day one is closed shows up as XPASS.
KNOWN_HOLES = {}
if landlock_abi() < 1:
    KNOWN_HOLES["side_write_native"] = (
        "file writes from native code (torch.save's C++ writer) bypass the Python audit hook; strict mode "
        "closes this with Landlock (evaluator/sandbox.py), which this kernel does not have"
    )


def _param(c):
    marks = []
    if c.name in KNOWN_HOLES:
        marks.append(pytest.mark.xfail(reason=KNOWN_HOLES[c.name], strict=False))
    if c.device == "gpu":
        marks.append(pytest.mark.gpu)
    if c.slow:
        marks.append(pytest.mark.slow)
    return pytest.param(c, id=c.name, marks=marks)


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
