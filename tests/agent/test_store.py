import json
import os
import sqlite3
import subprocess
import sys

import pytest
from kb_agent.agent.store import MIGRATIONS, Store, StoreError, default_db_path, migrate
from kb_agent.agent.store.migrations import m001_initial
from kb_agent.problems import Problem
from sqlite_utils import Database

RELU = Problem(0, 1, "relu", "class Model: ...\ndef get_inputs(): ...\ndef get_init_inputs(): ...\n", "toy")
MATMUL = Problem(
    2, 40, "40_Matmul_Scaling_ResidualAdd", "import torch\n", "hub:ScalingIntelligence/KernelBench"
)
MESSAGES = [{"role": "system", "content": "write kernels"}, {"role": "user", "content": "make it fast"}]


def eval_dict(status, speedup=None, runtime_ms=None, ref_runtime_ms=None):
    return {
        "status": status,
        "message": "",
        "speedup": speedup,
        "runtime_ms": runtime_ms,
        "ref_runtime_ms": ref_runtime_ms,
        "hardware": {"gpu_name": "NVIDIA H100"},
    }


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    yield s
    s.close()


def test_path_defaults_to_env_and_parent_is_created(tmp_path, monkeypatch):
    target = tmp_path / "deep" / "er" / "kb.sqlite"
    monkeypatch.setenv("KB_DB", str(target))
    assert default_db_path() == target
    with Store() as s:
        assert s.path == target
    assert target.is_file()
    monkeypatch.delenv("KB_DB")
    assert str(default_db_path()) == os.path.join("runs", "kb.sqlite")


def test_read_only_open_of_a_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(StoreError, match="kb-agent solve"):
        Store(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()


def test_fresh_database_has_every_migration_and_wal(store):
    assert store.applied_migrations() == [m.__name__ for m in MIGRATIONS]
    assert store.db.journal_mode == "wal"
    assert {"runs", "trajectories", "turns", "_migrations"} <= set(store.db.table_names())
    assert "finished" in store.db["runs"].columns_dict
    applied_at = [r["applied_at"] for r in store.db.query("SELECT applied_at FROM _migrations")]
    assert all(a.endswith("+00:00") for a in applied_at)


def test_reopening_applies_nothing_twice(tmp_path):
    Store(tmp_path / "kb.sqlite").close()
    with Store(tmp_path / "kb.sqlite") as s:
        assert migrate(s.db) == []
        assert len(s.applied_migrations()) == len(MIGRATIONS)


def test_database_at_m001_only_moves_forward_keeping_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    db = Database(path)
    assert migrate(db, (m001_initial,)) == ["m001_initial"]
    db["runs"].insert(
        {"id": "r-1", "name": "old", "created": "2026-01-01T00:00:00+00:00", "status": "finished"}
    )
    db["trajectories"].insert_all(
        [
            {"id": 1, "run_id": "r-1", "problem_key": "toy/relu", "problem_json": "{}", "sample": 0,
             "created": "2026-01-01T00:00:00+00:00"},
        ]
    )  # fmt: skip
    db.close()

    with Store(path) as s:
        assert s.applied_migrations() == [m.__name__ for m in MIGRATIONS]
        assert s.get_run("old")["finished"] is None  # m003's column exists, empty for old rows
        assert s.list_runs()[0]["trajectories"] == 1
        # m002's unique index now guards one trajectory per (run, problem, sample)
        indexes = {tuple(i.columns) for i in s.db["trajectories"].indexes}
        assert ("run_id", "problem_key", "sample") in indexes
        with pytest.raises(sqlite3.IntegrityError):
            s.db["trajectories"].insert(
                {
                    "run_id": "r-1",
                    "problem_key": "toy/relu",
                    "problem_json": "{}",
                    "sample": 0,
                    "created": "x",
                }
            )


def _migration_rows(db):
    return [r["name"] for r in db.query("SELECT name FROM _migrations ORDER BY rowid")]


def test_a_blank_database_gets_each_migration_once_in_order(tmp_path):
    db = Database(tmp_path / "kb.sqlite")
    names = [m.__name__ for m in MIGRATIONS]
    assert migrate(db) == names
    assert migrate(db) == []
    assert _migration_rows(db) == names  # recorded once each, in the order applied


def test_a_database_at_m003_gets_only_the_later_migrations_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    db = Database(path)
    assert migrate(db, MIGRATIONS[:3]) == ["m001_initial", "m002_trajectory_indexes", "m003_run_finished"]
    db["runs"].insert(
        {"id": "r-1", "name": "old", "created": "2026-01-01T00:00:00+00:00", "status": "finished",
         "finished": "2026-01-01T01:00:00+00:00"}
    )  # fmt: skip
    assert "pid" not in db["runs"].columns_dict and "problem_checks" not in db.table_names()
    db.close()

    db = Database(path)
    assert migrate(db) == [m.__name__ for m in MIGRATIONS[3:]]
    db.close()
    with Store(path) as s:
        assert _migration_rows(s.db) == [m.__name__ for m in MIGRATIONS]
        run = s.get_run("old")
        assert (run["finished"], run["pid"], run["host"]) == ("2026-01-01T01:00:00+00:00", None, None)
        assert "code_sha256" in s.db["problem_checks"].columns_dict


def test_every_migration_function_is_registered_once_and_numbered_in_order():
    import inspect
    import re

    from kb_agent.agent.store import migrations

    defined = [
        name
        for name, fn in inspect.getmembers(migrations, inspect.isfunction)
        if re.fullmatch(r"m\d{3}_\w+", name) and fn.__module__ == migrations.__name__
    ]
    names = [m.__name__ for m in MIGRATIONS]
    assert sorted(defined) == names == sorted(set(names))
    assert [int(n[1:4]) for n in names] == list(range(1, len(names) + 1))
    assert set(names) <= set(migrations.__all__)


def test_a_migration_out_of_sequence_is_refused():
    from kb_agent.agent.store.migrations import migration

    def m002_again(db):
        pass

    with pytest.raises(ValueError, match=f"must be named m{len(MIGRATIONS) + 1:03d}_"):
        migration(m002_again)

    def no_number(db):
        pass

    with pytest.raises(ValueError, match="must be named"):
        migration(no_number)


def test_the_package_exports_what_it_lists():
    import kb_agent.agent.store as store_pkg
    from kb_agent.agent.store import migrations

    for module in (store_pkg, migrations):
        assert all(hasattr(module, name) for name in module.__all__)
    assert {"Store", "StoreError", "running_elsewhere", "default_db_path", "migrate"} <= set(
        store_pkg.__all__
    )


def test_run_ids_sort_by_time_and_names_are_unique(store):
    a = store.create_run(None, {"turns": 3}, "openai/gpt-4o", "cuda", "fp32")
    b = store.create_run(None, {"turns": 3}, "openai/gpt-4o", "cuda", "fp32")
    assert a.startswith("r-") and a != b
    runs = store.list_runs()
    assert [r["id"] for r in runs] == [a, b]
    assert runs[0]["name"].startswith("gpt-4o-") and runs[0]["name"] != runs[1]["name"]
    store.create_run("mine", {}, "m", "triton", "fp16")
    with pytest.raises(StoreError, match="already exists"):
        store.create_run("mine", {}, "m", "triton", "fp16")
    assert store.latest_run()["name"] == "mine"


def test_a_run_name_that_resume_could_not_tell_apart_is_refused(store):
    """Found by a new user: `solve --run-name` took another run's id, and names with whitespace around
    them or control characters, as new names, so `--resume NAME_OR_ID` found the wrong run or none."""
    rid = store.create_run("first", {}, "m", "cuda", "fp32")
    bad = {rid: "another run's id", "r-20991231T235959-00ff": "looks like a run id", " first": "whitespace",
           "first ": "whitespace", "a\tb": "control character", "a\nb": "control character",
           "a\x1b[31mb": "control character", "": "empty", "  ": "empty"}  # fmt: skip
    for name, said in bad.items():
        with pytest.raises(StoreError, match=said) as e:
            store.create_run(name, {}, "m", "cuda", "fp32")
        assert "\n" not in str(e.value)
    assert [r["name"] for r in store.list_runs()] == ["first"]
    digits = store.create_run("123", {}, "m", "cuda", "fp32")  # ids are not integers: unambiguous
    assert store.get_run("123")["id"] == digits and store.get_run(rid)["name"] == "first"
    store.create_run("my run: fp16 (v2)", {}, "m", "cuda", "fp32")  # spaces inside are fine


def test_solve_refuses_a_bad_run_name_in_one_line_before_it_starts(tmp_path):
    db = tmp_path / "kb.sqlite"
    for args in (["solve", "--problem", "toy/relu", "--model", "scripted/demo", "--device", "cpu"],
                 ["fork", "some-run", "--turn", "2"]):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "kb_agent.agent.cli", *args, "--run-name", "demo ",
                            "--db", str(db)], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 2, r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert "whitespace around it" in line and "'demo'" in line, line
    assert not db.exists()


def test_run_round_trip_by_id_and_name(store):
    rid = store.create_run("r1", {"turns": 3, "nested": {"a": [1, 2]}}, "m", "cuda", "fp32", {"torch": "2.5"})
    run = store.get_run("r1")
    assert run == store.get_run(rid)
    assert run["config"] == {"turns": 3, "nested": {"a": [1, 2]}}
    assert run["versions"] == {"torch": "2.5"}
    assert (run["status"], run["gpu"], run["hardware"]) == ("running", None, None)
    store.set_run_hardware(rid, {"gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"})
    store.set_run_status(rid, "finished")
    run = store.get_run(rid)
    assert run["gpu"] == "NVIDIA H100 80GB HBM3" and run["hardware"]["compute_capability"] == "9.0"
    assert run["status"] == "finished" and run["finished"] is not None
    with pytest.raises(ValueError):
        store.set_run_status(rid, "done")


def test_versions_default_to_installed_packages(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    assert store.get_run(rid)["versions"]["sqlite-utils"]


def test_unknown_run_is_one_line_with_what_to_do(store):
    with pytest.raises(StoreError) as e:
        store.get_run("nope")
    assert "\n" not in str(e.value) and "kb-agent runs list" in str(e.value)
    with pytest.raises(StoreError, match="kb-agent solve"):
        store.latest_run()


def test_trajectory_keeps_the_whole_problem(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, MATMUL, sample=0)
    (t,) = store.trajectories(rid)
    assert (t["level"], t["problem_id"], t["problem_key"], t["sample"]) == (2, 40, "2/40", 0)
    assert store.problem_of(t) == MATMUL
    assert store.problem_of(tid) == MATMUL
    with pytest.raises(StoreError, match="already has a trajectory"):
        store.create_trajectory(rid, MATMUL, sample=0)
    store.create_trajectory(rid, MATMUL, sample=1)
    loose = Problem(None, 7, "7_mine", "x", "/somewhere/7_mine.py")
    store.create_trajectory(rid, loose, 0)
    assert store.trajectories(rid)[-1]["level"] is None


def test_turn_lifecycle_and_best_of_trajectory(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, RELU, 0)
    script = [
        ("compile_error", None),
        ("correct", 1.25),
        ("correct", 1.75),
        ("incorrect", None),
        ("correct", 1.75),
    ]
    for i, (status, speedup) in enumerate(script, start=1):
        u = store.start_turn(tid, i, MESSAGES)
        store.record_response(
            u, f"```python\n# turn {i}\n```", tokens_in=100 * i, tokens_out=50, cost_usd=0.01,
            latency_s=2.5, model_answered="gpt-4o-2024-08-06", finish_reason="stop", extra={"id": f"c{i}"},
        )  # fmt: skip
        runtime = 1.0 / speedup if speedup else None
        store.record_evaluation(
            u, code=f"# turn {i}", status=status,
            eval_result=eval_dict(status, speedup, runtime, 1.0 if speedup else None), feedback=f"fb {i}",
        )  # fmt: skip
    turns = store.turns(tid)
    assert [t["idx"] for t in turns] == [1, 2, 3, 4, 5]
    t2 = turns[1]
    assert t2["messages"] == MESSAGES and t2["llm_json"] == {"id": "c2"}
    assert (t2["correct"], t2["speedup"], t2["ref_runtime_ms"]) == (1, 1.25, 1.0)
    assert t2["runtime_ms"] == pytest.approx(0.8)
    assert t2["eval_json"]["hardware"]["gpu_name"] == "NVIDIA H100"
    assert (t2["tokens_in"], t2["cost_usd"], t2["model_answered"]) == (200, 0.01, "gpt-4o-2024-08-06")
    assert turns[0]["correct"] == 0 and turns[0]["feedback"] == "fb 1"
    assert all(t["created"] <= t["responded_at"] <= t["evaluated_at"] for t in turns)
    store.finish_trajectory(tid, "turn_budget")
    t = store.get_trajectory(tid)
    assert (t["outcome"], t["best_turn"], t["best_speedup"]) == ("turn_budget", 3, 1.75)  # earliest on a tie
    assert t["finished"] is not None


def test_no_correct_turn_leaves_best_empty_and_statuses_are_checked(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, RELU, 0)
    u = store.start_turn(tid, 1, MESSAGES)
    store.record_response(u, "no code here")
    store.record_evaluation(u, code=None, status="no_code", eval_result=None, feedback="put code in a block")
    with pytest.raises(ValueError):
        store.record_evaluation(u, code=None, status="great", eval_result=None, feedback="")
    with pytest.raises(ValueError):
        store.finish_trajectory(tid, "done")
    store.finish_trajectory(tid, "model_error")
    t = store.get_trajectory(tid)
    assert (t["best_turn"], t["best_speedup"]) == (None, None)
    assert store.turns(tid)[0]["eval_json"] is None


def test_record_evaluation_accepts_an_object_with_to_dict_and_enum_status(store):
    from kb_agent.evaluator.result import EvalResult, Status

    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, RELU, 0)
    u = store.start_turn(tid, 1, MESSAGES)
    store.record_response(u, "x")
    er = EvalResult(Status.CORRECT, speedup=2.0, runtime_ms=0.5, ref_runtime_ms=1.0)
    store.record_evaluation(u, code="x", status=Status.CORRECT, eval_result=er, feedback="")
    (t,) = store.turns(tid)
    assert (t["status"], t["speedup"]) == ("correct", 2.0)
    assert EvalResult.from_dict(t["eval_json"]) == er


def test_resume_queries(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    done = store.create_trajectory(rid, RELU, 0)
    cut = store.create_trajectory(rid, MATMUL, 0)
    stopped = store.create_trajectory(rid, MATMUL, 1)
    store.finish_trajectory(done, "turn_budget")
    store.finish_trajectory(stopped, "interrupted")
    assert [t["id"] for t in store.unfinished_trajectories(rid)] == [cut, stopped]

    # turn 1 answered and evaluated; turn 2 answered, killed before evaluation; turn 3 never answered
    u1 = store.start_turn(cut, 1, MESSAGES)
    store.record_response(u1, "r1")
    store.record_evaluation(
        u1, code="c", status="incorrect", eval_result=eval_dict("incorrect"), feedback="f"
    )
    u2 = store.start_turn(cut, 2, MESSAGES)
    store.record_response(u2, "r2")
    u3 = store.start_turn(cut, 3, MESSAGES)
    turns = store.turns(cut)
    to_evaluate = [t["idx"] for t in turns if t["response"] is not None and t["status"] is None]
    to_ask = [t["idx"] for t in turns if t["response"] is None]
    assert (to_evaluate, to_ask) == ([2], [3])

    # asking turn 3 again re-uses its row; asking turn 2 again is refused
    assert store.start_turn(cut, 3, [*MESSAGES, {"role": "user", "content": "again"}]) == u3
    assert len(store.turn(cut, 3)["messages"]) == 3
    with pytest.raises(StoreError, match="evaluate it"):
        store.start_turn(cut, 2, MESSAGES)


def test_writes_to_missing_rows_fail_loudly(store):
    with pytest.raises(StoreError):
        store.record_response(999, "x")
    with pytest.raises(StoreError):
        store.set_run_status("r-nope", "finished")


def test_a_write_is_visible_to_a_second_connection_at_once(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, RELU, 0)
    u = store.start_turn(tid, 1, MESSAGES)
    other = sqlite3.connect(store.path)
    try:
        assert other.execute("SELECT count(*) FROM turns WHERE response IS NULL").fetchone() == (1,)
        store.record_response(u, "the reply")
        assert other.execute("SELECT response FROM turns WHERE id = ?", (u,)).fetchone() == ("the reply",)
        assert not store.db.conn.in_transaction
    finally:
        other.close()


def test_a_reader_in_another_process_sees_rows_while_the_writer_holds_its_connection(store, tmp_path):
    rid = store.create_run("live", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, RELU, 0)
    store.start_turn(tid, 1, MESSAGES)
    code = (
        "import sys; from kb_agent.agent.store import Store\n"
        "s = Store(sys.argv[1], create=False)\n"
        "print(s.get_run('live')['id'], len(s.turns(s.trajectories(s.get_run('live')['id'])[0]['id'])))"
    )
    r = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [rid, "1"]


def test_store_does_not_import_torch_or_litellm():
    code = (
        "import sys, tempfile, os\n"
        "from kb_agent.agent.store import Store\nimport kb_agent.agent.metrics, kb_agent.agent.report\n"
        "Store(os.path.join(tempfile.mkdtemp(), 'kb.sqlite')).close()\n"
        "print([m for m in ('torch', 'litellm', 'triton', 'datasets') if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stderr


def test_a_failing_migration_leaves_the_previous_state(tmp_path):
    db = Database(tmp_path / "kb.sqlite")

    def m002_broken(db):
        db["half_made"].create({"id": int}, pk="id")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        migrate(db, (m001_initial, m002_broken))
    assert [r["name"] for r in db.query("SELECT name FROM _migrations")] == ["m001_initial"]
    assert "half_made" not in db.table_names() and "runs" in db.table_names()
    assert not db.conn.in_transaction


def test_a_file_that_is_not_a_database_is_a_one_line_store_error(tmp_path):
    bad = tmp_path / "garbage.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot use .* as the trajectory store"):
        Store(bad)
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)


def strict_eval(status, parity_status, failed=(), custom_share=None, speedup=None):
    """An EvalResult dict as strict mode records it: the checks, KernelBench's verdict, a GPU profile."""
    checks = {"static": {"passed": True, "detail": ""}}
    checks.update({name: {"passed": False, "detail": f"{name} failed"} for name in failed})
    profile = (
        None if custom_share is None else {"kernels": [], "total_us": 10.0, "custom_share": custom_share}
    )
    return {
        **eval_dict(status, speedup),
        "profile": profile,
        "strict": {"enabled": True, "parity_status": parity_status, "checks": checks},
    }


def test_a_turn_records_its_kernelbench_status_failed_checks_and_library_share(store):
    rid = store.create_run("r", {}, "m", "cuda", "fp32")
    tid = store.create_trajectory(rid, RELU, 0)
    cases = [
        ("rejected", strict_eval("rejected", "correct", ["custom_kernels_do_the_work"], 0.02, 1.02)),
        ("correct", strict_eval("correct", "correct", (), 0.75, 1.5)),
        ("incorrect", strict_eval("incorrect", "incorrect", ["relative_error"])),
        ("correct", eval_dict("correct", 1.2)),  # parity mode: no strict record, no profile
        ("no_code", None),
    ]
    for i, (status, er) in enumerate(cases, start=1):
        u = store.start_turn(tid, i, MESSAGES)
        store.record_response(u, "x")
        store.record_evaluation(u, code="x", status=status, eval_result=er, feedback="")
    got = [
        (t["status"], t["parity_status"], t["failed_checks"], t["library_share"]) for t in store.turns(tid)
    ]
    assert got == [
        ("rejected", "correct", ["custom_kernels_do_the_work"], pytest.approx(0.98)),
        ("correct", "correct", [], pytest.approx(0.25)),
        ("incorrect", "incorrect", ["relative_error"], None),
        ("correct", "correct", None, None),
        ("no_code", "no_code", None, None),
    ]
    summaries = store.turn_summaries(rid)
    assert [s["failed_checks"] for s in summaries] == [t[2] for t in got]
    assert summaries[0]["library_share"] == pytest.approx(0.98)


def test_library_share_is_read_from_the_strict_record_when_there_is_no_profile():
    from kb_agent.agent.store.rows import library_share

    assert library_share({"strict": {"custom_share": 0.3}}) == pytest.approx(0.7)
    assert library_share({"strict": {"library_share": 0.4, "custom_share": 0.3}}) == 0.4
    assert library_share({"profile": {"total_us": 0.0, "custom_share": 0.0}}) is None  # no GPU kernel ran
    assert library_share(None) is None


def test_a_database_at_m007_gets_its_turn_verdicts_filled_in(tmp_path):
    path = tmp_path / "old.sqlite"
    db = Database(path)
    migrate(db, MIGRATIONS[:7])
    db["runs"].insert(
        {"id": "r-1", "name": "old", "created": "2026-01-01T00:00:00+00:00", "status": "finished"}
    )
    db["trajectories"].insert(
        {
            "id": 1,
            "run_id": "r-1",
            "problem_key": "toy/relu",
            "problem_json": "{}",
            "sample": 0,
            "created": "x",
        }
    )
    rows = [
        ("rejected", strict_eval("rejected", "correct", ["speed_of_light"], 0.6, 3.0)),
        ("correct", eval_dict("correct", 1.1)),
        ("compile_error", None),
        (None, None),  # never evaluated
    ]
    for i, (status, er) in enumerate(rows, start=1):
        db["turns"].insert(
            {"trajectory_id": 1, "idx": i, "messages": "[]", "created": "x", "status": status,
             "eval_json": None if er is None else json.dumps(er)}
        )  # fmt: skip
    db.close()
    with Store(path) as s:
        assert "m008_turn_verdicts" in s.applied_migrations()  # and any later ones
        got = [(t["parity_status"], t["failed_checks"], t["library_share"]) for t in s.turns(1)]
    assert got == [
        ("correct", ["speed_of_light"], pytest.approx(0.4)),
        ("correct", None, None),
        ("compile_error", None, None),
        (None, None, None),
    ]


def test_two_processes_taking_the_same_default_run_name_both_get_a_run(tmp_path, monkeypatch):
    # seen by a new user: three solves started in one second, one died on UNIQUE constraint failed:
    # runs.name (the name was checked, then another process inserted it)
    from kb_agent.agent.store import Store as S

    with S(tmp_path / "kb.sqlite") as a, S(tmp_path / "kb.sqlite") as b:
        first = a.create_run(None, {}, "openai/m", "cuda", "fp32")
        monkeypatch.setattr(b, "_run_row", lambda column, value: None)  # b checks before a's insert lands
        second = b.create_run(None, {}, "openai/m", "cuda", "fp32")
        names = {a.get_run(first)["name"], a.get_run(second)["name"]}
    assert len(names) == 2


def test_a_store_locked_by_another_process_says_so_in_one_line(tmp_path):
    import sqlite3

    import pytest
    from kb_agent.agent.store import Store as S
    from kb_agent.agent.store import StoreError as E

    path = tmp_path / "kb.sqlite"
    S(path).close()
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(E, match="locked by another process.*try again when it is free"):
            S(path, timeout_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
