"""Export: one row per turn, as JSON Lines, Parquet (loadable with `datasets`) and CSV."""

import csv
import io
import json

import pytest
from kb_agent.agent.cli import app
from kb_agent.agent.export import COLUMNS, default_output, eval_summary, export_rows, export_run, file_stem
from kb_agent.agent.store import Store, StoreError
from kb_agent.problems import Problem
from kb_agent.problems.errors import UsageError
from typer.testing import CliRunner

REJECTED = {
    "status": "rejected",
    "message": "strict check failed: custom_kernel_source",
    "speedup": 2.0,
    "correctness": {"trials": 5, "passed": 5},
    "strict": {"enabled": True, "parity_status": "correct",
               "checks": {"static": {"passed": True}, "custom_kernel_source": {"passed": False}}},
}  # fmt: skip
INCORRECT = {
    "status": "incorrect",
    "message": "output mismatch in correctness trial 1 of 5 (values)\nmore",
    "correctness": {"trials": 5, "passed": 0},
}


def add_run(store, name="exp", speedups=True):
    """Two problems; problem 1: incorrect, rejected (correct under KernelBench's rules), correct 1.5x
    re-timed 1.4x; problem 2: no code, then a compile error."""
    rid = store.create_run(name, {"turns": 3, "device": "cpu"}, "openai/gpt-4o", "triton", "fp32")
    plan = {
        1: [("incorrect", INCORRECT), ("rejected", REJECTED),
            ("correct", {"status": "correct", "speedup": 1.5 if speedups else None, "runtime_ms": 1.0,
                         "ref_runtime_ms": 1.5, "correctness": {"trials": 5, "passed": 5}})],
        2: [("no_code", None), ("compile_error", {"status": "compile_error", "message": "SyntaxError: x"})],
    }  # fmt: skip
    for pid, turns in plan.items():
        tid = store.create_trajectory(rid, Problem(0, pid, f"{pid}_op", "import torch\n", "test"), 0)
        for i, (status, er) in enumerate(turns, start=1):
            u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
            store.record_response(u, f"reply {pid}.{i}", tokens_in=100 * i, tokens_out=10, cost_usd=0.01,
                                  latency_s=0.5, finish_reason="stop")  # fmt: skip
            code = None if status == "no_code" else f"# code {pid}.{i}\n"
            store.record_evaluation(
                u, code=code, status=status, eval_result=er, feedback=f"feedback {pid}.{i}"
            )
            if status == "correct" and speedups:
                store.record_retime(
                    u, {"status": "correct", "speedup": 1.4, "timing": {"repro_speedup": 1.41}}
                )
        store.finish_trajectory(tid, "turn_budget")
    return rid


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "kb.sqlite") as s:
        yield s


def test_one_row_per_turn_with_parent_verdicts_speedups_and_texts(store):
    rid = add_run(store)
    rows = export_rows(store, "exp")
    assert [(r["problem"], r["turn"], r["parent"]) for r in rows] == [
        ("toy/1_op", 1, None), ("toy/1_op", 2, 1), ("toy/1_op", 3, 2), ("toy/2_op", 1, None), ("toy/2_op", 2, 1)
    ]  # fmt: skip
    assert all(list(r) == list(COLUMNS) for r in rows)
    by = {(r["problem"], r["turn"]): r for r in rows}
    assert by[("toy/1_op", 2)]["parent_turn_id"] == by[("toy/1_op", 1)]["turn_id"]
    rej = by[("toy/1_op", 2)]
    assert (rej["status"], rej["parity_status"], rej["failed_checks"]) == (
        "rejected",
        "correct",
        ["custom_kernel_source"],
    )
    assert rej["correct"] is False
    best = by[("toy/1_op", 3)]
    assert (best["speedup"], best["retimed_speedup"], best["retimed_repro_speedup"]) == (1.5, 1.4, 1.41)
    assert (best["tokens_in"], best["tokens_out"], best["cost_usd"]) == (300, 10, 0.01)
    assert (
        best["code"] == "# code 1.3\n"
        and best["feedback"] == "feedback 1.3"
        and best["response"] == "reply 1.3"
    )
    assert json.loads(best["eval_json"])["speedup"] == 1.5
    assert by[("toy/2_op", 1)]["code"] is None and by[("toy/2_op", 1)]["status"] == "no_code"
    assert (best["run_id"], best["run_name"], best["level"], best["problem_name"]) == (rid, "exp", 0, "1_op")
    assert rows[0]["rescored_status"] is None


def test_eval_summary_lines():
    assert eval_summary({"status": "correct", "speedup": 1.23456, "eval_json": {"correctness": {"trials": 5, "passed": 5}}}) == (
        "correct 1.235x (5/5 trials)"
    )  # fmt: skip
    assert eval_summary({"status": "incorrect", "eval_json": INCORRECT}) == (
        "incorrect: output mismatch in correctness trial 1 of 5 (values) (0/5 trials)"
    )
    assert eval_summary({"status": "rejected", "parity_status": "correct", "failed_checks": ["threads"],
                         "eval_json": {"message": "strict"}}) == (
        "rejected: strict (KernelBench's rules: correct) (failed: threads)"
    )  # fmt: skip
    assert eval_summary({"status": None}) == "pending"


def test_eval_summary_of_a_message_whose_first_line_ends_in_a_colon_carries_the_error():
    """A compile error's summary read `compile_error: a Triton kernel failed to compile while running
    correctness trial 1: (0/5 trials)`, the error itself on the lines after the colon left out."""
    msg = ("a Triton kernel failed to compile while running correctness trial 1:\n\nTraceback (most recent call last):\n"
           '  File "kernel.py", line 3\nCompilationError: at 4:8: unsupported dtype\n')  # fmt: skip
    ej = {"message": msg, "correctness": {"trials": 5, "passed": 0}}
    assert eval_summary({"status": "compile_error", "eval_json": ej}) == (
        "compile_error: a Triton kernel failed to compile while running correctness trial 1: "
        "CompilationError: at 4:8: unsupported dtype (0/5 trials)")  # fmt: skip
    ej["message"] = "a Triton kernel failed to compile while running correctness trial 1:\n"
    assert eval_summary({"status": "compile_error", "eval_json": ej}) == (
        "compile_error: a Triton kernel failed to compile while running correctness trial 1 (0/5 trials)")  # fmt: skip


def test_parquet_loads_with_datasets_offline(store, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    add_run(store)
    path = export_run(store, "exp", "parquet", tmp_path / "out" / "turns.parquet")
    ds = datasets.load_dataset("parquet", data_files=str(path), cache_dir=str(tmp_path / "hf"))["train"]
    assert ds.num_rows == 5 and ds.column_names == list(COLUMNS)
    assert ds[1]["failed_checks"] == ["custom_kernel_source"] and ds[1]["parity_status"] == "correct"
    assert ds[2]["retimed_speedup"] == 1.4 and ds[0]["parent"] is None and ds[1]["parent"] == 1
    assert ds.features["speedup"].dtype == "float64" and ds.features["correct"].dtype == "bool"


def test_parquet_columns_keep_their_types_when_every_value_is_null(store, tmp_path):
    import pyarrow.parquet as pq

    add_run(store, speedups=False)
    schema = pq.read_schema(export_run(store, "exp", "parquet", tmp_path / "t.parquet"))
    assert (
        str(schema.field("speedup").type) == "double"
        and str(schema.field("retimed_speedup").type) == "double"
    )
    assert str(schema.field("rescored_status").type) == "string"


def test_jsonl_and_csv(store, tmp_path):
    add_run(store)
    lines = export_run(store, "exp", "jsonl", tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[1])["failed_checks"] == ["custom_kernel_source"]
    rows = list(csv.DictReader(io.StringIO(export_run(store, "exp", "csv", tmp_path / "t.csv").read_text())))
    assert len(rows) == 5 and list(rows[0]) == list(COLUMNS)
    assert json.loads(rows[1]["failed_checks"]) == ["custom_kernel_source"]
    assert rows[3]["code"] == "" and rows[2]["speedup"] == "1.5"


def test_latest_rescoring_is_in_its_columns(store):
    rid = add_run(store)
    turn = [t for t in store.run_turns(rid) if t["status"] == "correct"][0]
    store.record_rescore(turn["id"], "v1", {"status": "correct", "speedup": 1.3})
    store.record_rescore(turn["id"], "v2", {"status": "incorrect"})
    (row,) = [r for r in export_rows(store, rid) if r["turn_id"] == turn["id"]]
    assert (row["rescored_status"], row["rescored_speedup"], row["rescored_version"]) == (
        "incorrect",
        None,
        "v2",
    )


def test_cli_default_path_stdout_and_bad_input(store, tmp_path):
    add_run(store)
    runner = CliRunner()
    r = runner.invoke(app, ["export", "exp", "--db", str(store.path)])
    assert r.exit_code == 0, r.output
    assert default_output(store, "exp", "jsonl") == tmp_path / "exp.jsonl"
    assert len((tmp_path / "exp.jsonl").read_text().splitlines()) == 5
    r = runner.invoke(app, ["export", "exp", "--format", "csv", "--output", "-", "--db", str(store.path)])
    assert r.exit_code == 0 and r.output.splitlines()[0].startswith("run_id,run_name,model,problem")
    with pytest.raises(UsageError, match="choose one of jsonl, parquet, csv"):
        export_run(store, "exp", "xlsx")
    with pytest.raises(UsageError, match="parquet is binary"):
        export_run(store, "exp", "parquet", "-")
    with pytest.raises(UsageError, match="is a folder"):
        export_run(store, "exp", "csv", tmp_path)
    with pytest.raises(StoreError, match="no run 'nope'"):
        export_run(store, "nope")


def test_a_run_name_becomes_a_visible_file_name_of_bounded_length(tmp_path):
    # `solve --run-name ../x` then `view` / `export` wrote the hidden runs/.._x.html; a 300-character
    # name failed with "File name too long"
    assert file_stem("ok-1.2_3") == "ok-1.2_3"  # a name that is a file name already stays as it is
    stems = [file_stem(n) for n in ("a b", "a/b", "../x", ".x", "über", "x" * 300)]
    assert [s.rsplit("-", 1)[0] for s in stems] == ["a_b", "a_b", "_._x", "_x", "_ber", "x" * 191]
    assert len(set(stems)) == len(stems) and max(map(len, stems)) == 200  # two names never share a file
    db = tmp_path / "kb.sqlite"
    from kb_agent.agent.store import Store

    with Store(db) as store:
        store.create_run("x" * 300, {}, "openai/m", "cuda", "fp32")
    for cmd, suffix in (["export"], ".jsonl"), (["view"], ".html"):
        r = CliRunner().invoke(app, [*cmd, "x" * 300, "--db", str(db)])
        assert r.exit_code == 0, r.output
        assert (tmp_path / (file_stem("x" * 300) + suffix)).exists()


def test_an_unwritable_output_is_one_line_not_a_traceback(tmp_path):
    # seen by a new user: export -o README.md/x.jsonl and view -o into a file-as-folder gave tracebacks
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    db = tmp_path / "kb.sqlite"
    from kb_agent.agent.store import Store

    with Store(db) as store:
        run_id = store.create_run("r1", {}, "openai/m", "cuda", "fp32")
    for args in (["export", run_id, "--format", "jsonl", "--output", str(blocker / "x.jsonl")],
                 ["view", run_id, "--output", str(blocker / "x.html")]):  # fmt: skip
        r = CliRunner().invoke(app, [*args, "--db", str(db)])
        # the CLI's main() prints a UsageError as one line with exit code 2
        assert isinstance(r.exception, UsageError), r.output
        assert str(r.exception).startswith("cannot write") and "choose another --output" in str(r.exception)


def test_the_format_follows_the_output_suffix_and_a_mismatch_is_one_line(store, tmp_path):
    """Found by a new user: `export RUN --format csv -o x.parquet` wrote CSV into x.parquet without a word;
    `-o y.csv` alone wrote JSON Lines into it."""
    add_run(store)
    runner = CliRunner()
    r = runner.invoke(app, ["export", "exp", "--format", "csv", "-o", str(tmp_path / "x.parquet"),
                            "--db", str(store.path)])  # fmt: skip
    assert isinstance(r.exception, UsageError) and not (tmp_path / "x.parquet").exists()
    assert str(r.exception) == (
        f"--format csv does not match --output '{tmp_path / 'x.parquet'}', a parquet name; "
        "drop --format to write parquet, or end the file name in .csv"
    )
    for name, first in (("y.csv", "run_id,run_name"), ("y.JSONL", '{"run_id"')):
        assert export_run(store, "exp", None, tmp_path / name).read_text().startswith(first)
    assert pq_rows(export_run(store, "exp", None, tmp_path / "y.parquet")) == 5
    with pytest.raises(UsageError, match=r"cannot tell the format from --output .*y\.txt.*give --format"):
        export_run(store, "exp", None, tmp_path / "y.txt")
    assert export_run(store, "exp", "csv", tmp_path / "y.txt").read_text().startswith("run_id,")  # said so
    assert export_run(store, "exp", "csv", tmp_path / "new" / "deeper" / "z.csv").is_file()  # as --help says
    assert runner.invoke(app, ["export", "exp", "-o", "-", "--db", str(store.path)]).output.startswith(
        '{"run_id"'
    )


def pq_rows(path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def test_a_turn_that_reused_an_earlier_result_is_marked_so_its_figures_are_not_counted_twice(store):
    # `solve` gives a repeated kernel the earlier evaluation's result: the row must say it is a copy
    rid = store.create_run("re", {"turns": 2, "device": "cpu"}, "openai/gpt-4o", "triton", "fp32")
    tid = store.create_trajectory(rid, Problem(0, 1, "1_op", "import torch\n", "test"), 0)
    first = {"status": "correct", "speedup": 1.5, "stages": {"timing": 2.0}}
    again = {**first, "stages": {}, "reused": {"stages": {"timing": 2.0}, "child_start": {}}}
    for i, er in enumerate((first, again), start=1):
        u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
        store.record_response(u, "reply", tokens_in=1, tokens_out=1, finish_reason="stop")
        store.record_evaluation(u, code="# same\n", status="correct", eval_result=er, feedback="f")
    rows = export_rows(store, "re")
    assert [r["reused"] for r in rows] == [False, True]
    assert [r["eval_summary"] for r in rows] == ["correct 1.500x", "correct 1.500x (reused)"]


def test_a_tree_turn_exports_the_node_it_continues_not_the_turn_before(store):
    # a beam or tree run: turns 1 and 2 are roots, turn 3 continues turn 1 (the export said 2: turn - 1)
    rid = store.create_run("tree", {"turns": 3, "device": "cpu"}, "openai/gpt-4o", "triton", "fp32")
    tid = store.create_trajectory(rid, Problem(0, 1, "1_op", "import torch\n", "test"), 0)
    for idx, parent in ((1, 0), (2, 0), (3, 1)):
        store.start_turn(tid, idx, [{"role": "user", "content": "go"}], parent_idx=parent)
    rows = {r["turn"]: r for r in export_rows(store, "tree")}
    assert [rows[i]["parent"] for i in (1, 2, 3)] == [None, None, 1]
    assert rows[3]["parent_turn_id"] == rows[1]["turn_id"] and rows[2]["parent_turn_id"] is None
