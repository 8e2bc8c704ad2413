"""`check_problem` flags degenerate references (run on CPU with small references of our own: the
templates below, and one KernelBench-format file per class of METR's filter in tests/problems_degenerate)."""

import json
from pathlib import Path

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
        # the mean moves by ~0.005 between trials: no constant passes at fp32's 1e-4, one does at 1e-2
        pytest.param("x.mean() + torch.zeros_like(x) + 2.0", ["constant_pass_loose"], marks=SLOW),
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


# ---------------------------------------------------------------- one file per class (issue 19)

DEGENERATE = Path(__file__).resolve().parent.parent / "problems_degenerate"
# file -> (status, flags, unchecked reason); each file's docstring says why
EXPECTED = {
    "1_signal_fades": ("flagged", ["input_independent"], None),
    "2_mostly_table": ("flagged", ["mostly_input_independent"], None),
    "3_mostly_zeros": ("flagged", ["mostly_zeros"], None),
    "4_mostly_constant": ("flagged", ["mostly_constant"], None),
    "5_tiny_scale": ("flagged", ["zeros_pass_loose", "constant_pass_loose"], None),
    "6_stored_hidden": ("flagged", ["state_carried"], None),
    "7_missing_package": ("unchecked", [], "package"),
    "8_pretrained": ("unchecked", [], "downloads"),
}


def test_every_file_of_the_folder_has_its_expectation():
    assert sorted(p.stem for p in DEGENERATE.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", [n if n in ("3_mostly_zeros", "7_missing_package") else pytest.param(n, marks=SLOW) for n in sorted(EXPECTED)])  # fmt: skip
def test_each_class_is_flagged_through_the_real_child(name):
    status, flags, reason = EXPECTED[name]
    c = check_problem(resolve_one(str(DEGENERATE / f"{name}.py")), EvalSettings(device="cpu"))
    assert (c["status"], c["flags"]) == (status, flags), c
    assert (c["unchecked"] or {}).get("reason") == reason
    assert [f["flag"] for f in c["findings"] or []] == flags
    if status == "flagged":  # the verdicts come with the fractions behind them, at each tolerance
        assert [(m["atol"], m["own"]) for m in c["measures"]] == [(1e-4, True), (1e-2, False)]
        assert c["measures"][1]["precisions"] == ["fp16", "bf16"]


def test_findings_name_fraction_threshold_and_tolerance():
    from kb_agent.evaluator import thresholds

    zeros = check_problem(resolve_one(str(DEGENERATE / "3_mostly_zeros.py")), EvalSettings(device="cpu"))
    (f,) = zeros["findings"]
    assert f["flag"] == "mostly_zeros" and f["threshold"] == thresholds.MOSTLY_ZEROS_FRACTION
    assert 0.75 < f["fraction"] < 0.85 and (f["atol"], f["rtol"]) == (1e-4, 1e-4)  # relu(x - 0.8): ~80 %
    assert f["fraction"] == zeros["measures"][0]["zeros_fraction"]
    tiny = check_problem(resolve_one(str(DEGENERATE / "5_tiny_scale.py")), EvalSettings(device="cpu"))
    assert [(f["flag"], f["atol"], f["fraction"]) for f in tiny["findings"]] == [
        ("zeros_pass_loose", 1e-2, 1.0), ("constant_pass_loose", 1e-2, 1.0)
    ]  # fmt: skip
    assert tiny["measures"][0]["zeros_fraction"] < 0.2  # x * 1e-3 of x in [0, 1): ~10 % below 1e-4


def test_checked_in_half_precision_there_is_no_looser_tolerance():
    c = check_problem(
        resolve_one(str(DEGENERATE / "5_tiny_scale.py")), EvalSettings(device="cpu", precision="fp16")
    )
    assert c["flags"] == ["zeros_pass", "constant_pass"]  # at fp16's own 1e-2, nothing is "_loose"
    assert [(m["atol"], m["precisions"]) for m in c["measures"]] == [(1e-2, ["fp16", "bf16"])]


@pytest.mark.slow  # 3.6 s: a reference child (the default run's 3-minute budget)
def test_the_check_turns_downloads_off_itself(monkeypatch):
    # 8_pretrained raises RuntimeError (reference_fails) unless HF_HUB_OFFLINE=1 reaches it
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    c = check_problem(resolve_one(str(DEGENERATE / "8_pretrained.py")), EvalSettings(device="cpu"))
    assert c["status"] == "unchecked" and c["unchecked"]["reason"] == "downloads", c
    assert "from_pretrained (line " in c["message"] and "HF_HOME" in c["message"]


def test_tolerances_and_implied_flags():
    from kb_agent.evaluator.stages.problem_check import check_tolerances, judge

    assert [(t["atol"], t["own"]) for t in check_tolerances(1e-4, 1e-4)] == [(1e-4, True), (1e-2, False)]
    assert [t["atol"] for t in check_tolerances(1e-2, 1e-2)] == [1e-2]
    assert [t["atol"] for t in check_tolerances(1e-3, 1e-4)] == [1e-3, 1e-2]  # a user's own atol first
    own = {"atol": 1e-4, "rtol": 1e-4, "precisions": ["fp32"], "own": True}
    loose = {"atol": 1e-2, "rtol": 1e-2, "precisions": ["fp16", "bf16"], "own": False}
    fractions = ("zeros_fraction", "constant_fraction", "unchanged_fraction")
    verdicts = ("zeros_pass", "constant_pass", "unchanged_pass")
    measures = [
        {**own, **dict(zip(fractions, (0.9, 0.1, 0.96), strict=True)), **dict.fromkeys(verdicts, False)},
        {**loose, **dict.fromkeys(fractions, 1.0), **dict.fromkeys(verdicts, True)},
    ]
    flags = [f["flag"] for f in judge({}, measures, False, 1e-4, 1e-4)]
    # at 1e-2 a zero output passes, which implies the rest there; at 1e-4 the fractions are flagged
    assert flags == ["mostly_zeros", "mostly_input_independent", "zeros_pass_loose", "constant_pass_loose"]
    measures[0]["unchanged_fraction"] = 0.95  # METR's "more than 95 %": exactly 95 % is not flagged
    assert "mostly_input_independent" not in [f["flag"] for f in judge({}, measures, False, 1e-4, 1e-4)]


@pytest.mark.slow
def test_a_reference_too_large_for_the_memory_is_unchecked_and_stored(tmp_path):
    from kb_agent.agent.checks import check_problems
    from kb_agent.agent.store import Store

    ref = tmp_path / "1_large.py"
    ref.write_text(TEMPLATE.replace("self.drop = nn.Dropout(0.5)", "self.big = torch.ones(2**29)")
                   .format(body="x + __import__('time').sleep(3) * 0"))  # fmt: skip
    store = Store(tmp_path / "kb.sqlite")
    settings = EvalSettings(device="cpu", max_memory_gb=1.5)
    (c,) = check_problems([resolve_one(str(ref))], settings, store=store)
    assert c["status"] == "unchecked" and c["unchecked"]["reason"] == "memory", c
    (row,) = store.problem_checks()
    assert (row["status"], row["unchecked_reason"], row["flags"]) == ("unchecked", "memory", [])


def test_findings_are_stored_with_fraction_and_tolerance_and_unchecked_keeps_a_finding(tmp_path):
    from kb_agent.agent.store import Store

    store = Store(tmp_path / "kb.sqlite")
    p = resolve_one(str(DEGENERATE / "3_mostly_zeros.py"))
    base = {"key": p.key, "level": p.level, "problem_id": p.problem_id, "name": p.name, "precision": "fp32",
            "code_sha256": p.code_sha256, "gpu_name": "NVIDIA H200", "details": []}  # fmt: skip
    finding = {"flag": "mostly_zeros", "atol": 1e-4, "rtol": 1e-4, "fraction": 0.8, "threshold": 0.7,
               "precisions": ["fp32"]}  # fmt: skip
    measures = [{"atol": 1e-4, "rtol": 1e-4, "precisions": ["fp32"], "own": True, "zeros_fraction": 0.8,
                 "constant_fraction": 0.0, "unchanged_fraction": 0.6}]  # fmt: skip
    store.record_problem_check({**base, "status": "flagged", "flags": ["mostly_zeros"], "findings": [finding],
                                "measures": measures})  # fmt: skip
    (row,) = store.problem_checks("NVIDIA H200", "fp32")
    assert row["findings"] == [{k: v for k, v in finding.items()}]
    assert (row["atol"], row["rtol"], row["measures"]) == (1e-4, 1e-4, measures)
    # an unchecked result of the same source (another machine without the memory) keeps the finding
    store.record_problem_check({**base, "status": "unchecked", "flags": [],
                                "unchecked": {"reason": "memory", "message": "out of memory"}})  # fmt: skip
    (row,) = store.problem_checks("NVIDIA H200", "fp32")
    assert row["status"] == "flagged" and row["findings"][0]["fraction"] == 0.8
    # a new check replaces the old one and its findings
    store.record_problem_check({**base, "status": "ok", "flags": [], "findings": [], "measures": []})
    (row,) = store.problem_checks("NVIDIA H200", "fp32")
    assert (row["status"], row["findings"]) == ("ok", [])
    raw = list(store.db.query("SELECT COUNT(*) AS n FROM problem_check_findings"))
    assert raw[0]["n"] == 0


def test_checks_stored_before_the_findings_table_still_load(tmp_path):
    from kb_agent.agent.store import MIGRATIONS, Store, migrate
    from sqlite_utils import Database

    path = tmp_path / "old.sqlite"
    db = Database(path)
    names = [m.__name__ for m in MIGRATIONS]
    migrate(db, MIGRATIONS[: names.index("m011_problem_check_findings")])
    db["problem_checks"].insert(
        {"problem_key": "1/23", "level": 1, "problem_id": 23, "name": "23_Softmax", "gpu": "NVIDIA H200",
         "precision": "fp32", "status": "flagged", "flags": json.dumps(["zeros_pass", "constant_pass"]),
         "nondeterministic": 0, "zeros_pass": 1, "constant_pass": 1, "details": "[]", "checked": "x"}
    )  # fmt: skip
    db.close()
    with Store(path) as s:
        (row,) = s.problem_checks()
        assert row["flags"] == ["zeros_pass", "constant_pass"] and row["measures"] == []
        assert [(f["flag"], f["fraction"], f["atol"]) for f in row["findings"]] == [
            ("zeros_pass", None, None), ("constant_pass", None, None)
        ]  # fmt: skip


# ------------------------------------- the first trial drawn again must be the first trial (issue 19)
REDRAWN_OTHERWISE = """
import torch
import torch.nn as nn

CALLS = [0]


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    CALLS[0] += 1  # the fourth draw (the first trial again, after 3 trials) gives other values
    return [torch.rand(64, 64) + (1.0 if CALLS[0] > 3 else 0.0)]


def get_init_inputs():
    return []
"""


def test_a_first_trial_that_does_not_come_again_is_no_state_carried(tmp_path):
    # on the H200, next to other checks, a device draw that ran out of memory fell back to the CPU's
    # generator: other values for the same seed, and five stateless level-1 references (1/30 Softsign,
    # 1/45, 1/49, 1/90, 1/100) read state_carried
    ref = tmp_path / "1_redrawn.py"
    ref.write_text(REDRAWN_OTHERWISE)
    c = check_problem(resolve_one(str(ref)), EvalSettings(device="cpu", correctness_trials=3))
    assert c["status"] == "ok" and c["flags"] == [], c
    assert c["state_carried"] is None
    assert any("state carried between calls not checked" in d for d in c["details"]), c["details"]


@pytest.mark.parametrize(
    "error, drawn_again",
    [("CUDA out of memory. Tried to allocate 6.00 GiB", False), ("expected all tensors on one device", True)],
)
def test_a_device_draw_out_of_memory_is_raised_not_drawn_again_on_the_cpu(error, drawn_again):
    from types import SimpleNamespace

    import torch
    from kb_agent.evaluator.context import Evaluation

    draws = []

    def get_inputs():
        draws.append(1)
        if len(draws) == 1:
            raise (torch.OutOfMemoryError if "memory" in error else RuntimeError)(error)
        return [torch.ones(2)]

    ev = SimpleNamespace(torch=torch, device=torch.device("cuda"), settings=EvalSettings(inputs_on_device=True),
                         ref_mod=SimpleNamespace(get_inputs=get_inputs), prepare=lambda v: v)  # fmt: skip
    if drawn_again:  # another failure of the device draw: drawn on the CPU from the same generator state
        assert Evaluation.draw_inputs(ev)[0].tolist() == [1.0, 1.0] and len(draws) == 2
    else:  # out of memory: raised, never a second draw from the CPU's generator (other values)
        with pytest.raises(torch.OutOfMemoryError):
            Evaluation.draw_inputs(ev)
        assert len(draws) == 1


def test_the_memory_limit_is_capped_to_the_machine(monkeypatch):
    # a new-user pass on a 24 GiB machine: the default 32 GiB never fired, the kernel's OOM killer did
    from kb_agent.evaluator import runner

    monkeypatch.setattr(runner, "machine_memory_bytes", lambda: 24 * 2**30)
    assert runner.memory_limit_gb(EvalSettings(device="cpu")) == 19.2  # 0.8 of 24 GiB
    assert runner.memory_limit_gb(EvalSettings(device="cpu", max_memory_gb=4.0)) == 4.0
    monkeypatch.setattr(runner, "machine_memory_bytes", lambda: None)  # no /proc/meminfo: the setting
    assert runner.memory_limit_gb(EvalSettings(device="cpu")) == 32.0


@pytest.mark.slow
def test_a_check_past_the_machines_memory_is_retried_alone_then_unchecked(tmp_path, monkeypatch):
    from kb_agent.agent.checks import check_problems
    from kb_agent.evaluator import runner

    monkeypatch.setattr(runner, "machine_memory_bytes", lambda: 2 * 2**30)  # limit 1.6 GiB, not 32
    large, small = tmp_path / "1_large.py", tmp_path / "2_small.py"
    large.write_text(TEMPLATE.replace("self.drop = nn.Dropout(0.5)", "self.big = torch.ones(2**29)")
                     .format(body="x + __import__('time').sleep(3) * 0"))  # fmt: skip
    small.write_text(TEMPLATE.format(body="torch.relu(x)"))
    calls = []

    def check(p, s):
        calls.append(p.name)
        return runner.check_problem(p, s)

    problems = [resolve_one(str(large)), resolve_one(str(small))]
    big, ok = check_problems(problems, EvalSettings(device="cpu"), jobs=2, check=check)
    assert calls.count(problems[0].name) == 2 and calls.count(problems[1].name) == 1, calls
    assert big["status"] == "unchecked" and big["unchecked"]["reason"] == "memory", big
    assert "1.6 GiB" in big["message"] and big["memory_limit_gb"] == 1.6
    assert ok["status"] == "ok" and ok["memory_limit_gb"] == 1.6
