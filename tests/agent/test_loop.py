"""The agent loop with the fakes: ScriptedModel, ScriptedEvaluator, and a real store in tmp_path.
(The loop through litellm and the fake HTTP server is in test_llm.py, which imports litellm.)"""

import pytest
from kb_agent.agent.llm import LLMError, LLMReply, ScriptedModel
from kb_agent.agent.loop import SolveConfig, TurnEvent, resume, solve
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.evaluator.result import CompileInfo, EvalResult, HardwareInfo, Status
from kb_agent.problems import resolve

RELU, VADD = resolve("toy")[:2]


def code(tag: str) -> str:
    return (
        f"Here you go.\n```python\nimport torch\n\nclass ModelNew(torch.nn.Module):  # {tag}\n    pass\n```\n"
    )


def cfg(**kw) -> SolveConfig:
    return SolveConfig(**{"gpu_name": "NVIDIA H100 80GB HBM3", "arch": "9.0", **kw})


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "kb.sqlite")
    yield s
    s.close()


def only_traj(store, run_id, key=RELU.key, sample=0):
    (t,) = [t for t in store.trajectories(run_id) if t["problem_key"] == key and t["sample"] == sample]
    return t


def test_three_turns_store_everything_and_feed_back(store):
    model = ScriptedModel([code("v1"), code("v2"), code("v3")])
    compile_error = EvalResult(
        Status.COMPILE_ERROR,
        message="build failed",
        compile=CompileInfo(ok=False, errors=["k.cu(3): error: x"]),
    )
    evaluator = ScriptedEvaluator([compile_error, canned("incorrect"), canned("correct", 1.5)])
    events: list[TurnEvent] = []
    run_id = solve([RELU], cfg(turns=3), model, evaluator, store, on_turn=events.append)

    run = store.get_run(run_id)
    assert run["status"] == "finished" and run["model"] == "scripted" and run["backend"] == "cuda"
    assert run["config"]["turns"] == 3 and run["config"]["llm"]["name"] == "scripted"
    traj = only_traj(store, run_id)
    assert traj["outcome"] == "turn_budget" and traj["best_turn"] == 3 and traj["best_speedup"] == 1.5
    turns = store.turns(traj["id"])
    assert [t["status"] for t in turns] == ["compile_error", "incorrect", "correct"]
    assert [t["response"] for t in turns] == [code("v1"), code("v2"), code("v3")]
    assert "# v2" in turns[1]["code"] and turns[2]["speedup"] == 1.5
    assert turns[0]["eval_json"]["compile"]["errors"] == ["k.cu(3): error: x"]
    assert all(t["llm_json"]["attempts"] == 1 for t in turns)
    # what the model saw: system + task, then each reply and its feedback
    assert [m["role"] for m in model.calls[2]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "k.cu(3): error: x" in model.calls[1][3]["content"]
    assert model.calls[2][3] == model.calls[1][3] and "incorrect" in model.calls[2][5]["content"]
    assert turns[1]["messages"] == model.calls[1]
    assert RELU.code.strip() in model.calls[0][1]["content"] and "NVIDIA H100" in model.calls[0][1]["content"]
    assert "Make it faster" in turns[2]["feedback"]  # rendered for the last turn too
    assert evaluator.calls[0] == (RELU.key, turns[0]["code"])
    assert [(e.idx, e.status, e.speedup) for e in events] == [
        (1, "compile_error", None),
        (2, "incorrect", None),
        (3, "correct", 1.5),
    ]


def test_reply_without_code_is_no_code_and_skips_the_evaluator(store):
    cut = LLMReply(
        text="Let me think step by step about the tiling...",
        finish_reason="length",
        tokens_in=5,
        tokens_out=9,
    )
    model = ScriptedModel(["I would rather explain.", cut, code("ok")])
    evaluator = ScriptedEvaluator([canned("correct", 2.0)])
    run_id = solve([RELU], cfg(turns=3), model, evaluator, store)
    turns = store.turns(only_traj(store, run_id)["id"])
    assert [t["status"] for t in turns] == ["no_code", "no_code", "correct"]
    assert turns[0]["code"] is None and len(evaluator.calls) == 1
    assert "```python" in model.calls[1][-1]["content"] and "class ModelNew" in model.calls[1][-1]["content"]
    assert "cut off at the token limit" in model.calls[2][-1]["content"]
    assert turns[1]["finish_reason"] == "length" and turns[1]["tokens_out"] == 9


def test_context_last_sends_only_the_previous_exchange(store):
    model = ScriptedModel([code("a"), code("b"), code("c")])
    solve([RELU], cfg(turns=3, context="last"), model, ScriptedEvaluator([canned("incorrect")]), store)
    assert len(model.calls[0]) == 2 and len(model.calls[1]) == 4 and len(model.calls[2]) == 4
    assert model.calls[2][:2] == model.calls[0] and "# b" in model.calls[2][2]["content"]


def test_model_error_ends_the_trajectory_not_the_run(store):
    model = ScriptedModel([code("a"), LLMError("openai/x: RateLimitError (after 6 attempts)"), code("b")])
    run_id = solve([RELU, VADD], cfg(turns=2), model, ScriptedEvaluator([canned("correct", 1.1)]), store)
    assert store.get_run(run_id)["status"] == "finished_with_errors"  # not "finished": it says so
    relu, vadd = only_traj(store, run_id), only_traj(store, run_id, VADD.key)
    assert relu["outcome"] == "model_error" and relu["best_speedup"] == 1.1
    t2 = store.turns(relu["id"])[1]
    assert t2["status"] == "model_error" and t2["response"] is None
    assert vadd["outcome"] == "model_error"  # the script ran out on its 2nd turn
    assert [t["status"] for t in store.turns(vadd["id"])] == ["correct", "model_error"]


def test_token_budget_per_trajectory(store):
    reply = LLMReply(text=code("x"), tokens_in=400, tokens_out=200, cost_usd=None)
    model = ScriptedModel([reply] * 10)
    run_id = solve(
        [RELU, VADD], cfg(turns=5, token_budget=1000), model, ScriptedEvaluator([canned("incorrect")]), store
    )
    for key in (RELU.key, VADD.key):
        traj = only_traj(store, run_id, key)
        assert traj["outcome"] == "token_budget" and len(store.turns(traj["id"])) == 2  # 600, 1200 -> stop
    assert len(model.calls) == 4


def test_cost_budget_per_run_marks_the_rest_unattempted(store):
    reply = LLMReply(text=code("x"), tokens_in=1, tokens_out=1, cost_usd=0.03)
    model = ScriptedModel([reply] * 10)
    run_id = solve(
        [RELU, VADD],
        cfg(turns=5, cost_budget_usd=0.05),
        model,
        ScriptedEvaluator([canned("incorrect")]),
        store,
    )
    relu, vadd = only_traj(store, run_id), only_traj(store, run_id, VADD.key)
    assert relu["outcome"] == "cost_budget" and len(store.turns(relu["id"])) == 2
    assert vadd["outcome"] == "cost_budget" and store.turns(vadd["id"]) == []
    assert store.get_run(run_id)["status"] == "finished"


def test_samples_make_independent_trajectories(store):
    model = ScriptedModel([code(str(i)) for i in range(4)])
    run_id = solve(
        [RELU, VADD], cfg(turns=1, samples=2), model, ScriptedEvaluator([canned("correct", 1.0)]), store
    )
    trajs = store.trajectories(run_id)
    assert [(t["problem_key"], t["sample"]) for t in trajs] == [
        (RELU.key, 0),
        (RELU.key, 1),
        (VADD.key, 0),
        (VADD.key, 1),
    ]
    assert all(len(c) == 2 for c in model.calls)  # each sample starts from the task prompt


def test_an_interrupt_while_the_trajectories_are_made_leaves_no_run(store):
    # Ctrl-C during a large --samples left a `running` run (read as killed) holding some of its
    # trajectories, which `--resume` took for the whole run
    class Stops(type(VADD)):
        def to_dict(self):
            raise KeyboardInterrupt

    stops = Stops(VADD.level, VADD.problem_id, VADD.name, VADD.code, VADD.source)
    with pytest.raises(KeyboardInterrupt):
        solve(
            [RELU, stops],
            cfg(turns=1, samples=3, run_name="cut"),
            ScriptedModel([]),
            ScriptedEvaluator([canned("incorrect")]),
            store,
        )
    assert store.list_runs() == [] and list(store.db.query("SELECT id FROM trajectories")) == []


def test_interrupt_while_waiting_for_the_model_then_resume_asks_again(store):
    model = ScriptedModel([code("a"), KeyboardInterrupt()])
    evaluator = ScriptedEvaluator([canned("incorrect"), canned("correct", 1.3)])
    with pytest.raises(KeyboardInterrupt):
        solve([RELU, VADD], cfg(turns=2, run_name="stopped"), model, evaluator, store)
    run = store.get_run("stopped")
    assert run["status"] == "interrupted"
    relu = only_traj(store, run["id"])
    assert relu["outcome"] == "interrupted" and only_traj(store, run["id"], VADD.key)["outcome"] is None
    t2 = store.turns(relu["id"])[1]
    assert t2["response"] is None and t2["status"] is None

    model2 = ScriptedModel([code("b"), code("c"), code("d")])
    assert resume("stopped", model2, evaluator, store) == run["id"]
    assert store.get_run("stopped")["status"] == "finished"
    assert [len(c) for c in model2.calls] == [4, 2, 4]  # relu turn 2 (re-asked), then vadd turns 1-2
    assert "# a" in model2.calls[0][2]["content"]  # the stored turn 1 is in the rebuilt conversation
    relu = only_traj(store, run["id"])
    assert relu["outcome"] == "turn_budget"
    assert [t["status"] for t in store.turns(relu["id"])] == ["incorrect", "correct"]


class StopOnCall(ScriptedEvaluator):
    """Raises KeyboardInterrupt on evaluation number `n` (1-based), like a Ctrl-C during a build."""

    def __init__(self, results, n):
        super().__init__(results)
        self.n = n

    def evaluate(self, problem, candidate_source):
        if len(self.calls) + 1 == self.n:
            self.calls.append((problem.key, candidate_source))
            raise KeyboardInterrupt
        return super().evaluate(problem, candidate_source)


def test_interrupt_during_evaluation_resume_evaluates_the_stored_reply_without_asking(store):
    model = ScriptedModel([code("a"), code("b")])
    with pytest.raises(KeyboardInterrupt):
        solve([RELU], cfg(turns=3, run_name="r"), model, StopOnCall([canned("incorrect")], n=2), store)
    relu = only_traj(store, store.get_run("r")["id"])
    t2 = store.turns(relu["id"])[1]
    assert t2["response"] == code("b") and t2["status"] is None

    model2 = ScriptedModel([code("c")])
    evaluator2 = ScriptedEvaluator([canned("correct", 2.0), canned("correct", 2.5)])
    resume("r", model2, evaluator2, store)
    assert len(model2.calls) == 1  # only turn 3 was asked
    assert "# b" in evaluator2.calls[0][1]  # turn 2's stored reply was evaluated
    assert "# b" in model2.calls[0][4]["content"] and "Make it faster" in model2.calls[0][5]["content"]
    relu = only_traj(store, relu["run_id"])
    assert relu["outcome"] == "turn_budget" and relu["best_turn"] == 3 and relu["best_speedup"] == 2.5


def test_resume_leaves_finished_trajectories_alone_and_can_retry_model_errors(store):
    model = ScriptedModel([code("a"), LLMError("boom")])
    run_id = solve([RELU], cfg(turns=2), model, ScriptedEvaluator([canned("incorrect")]), store)
    model2 = ScriptedModel([])
    resume(run_id, model2, ScriptedEvaluator([canned("incorrect")]), store)
    assert model2.calls == []
    model3 = ScriptedModel([code("b")])
    resume(run_id, model3, ScriptedEvaluator([canned("correct", 1.2)]), store, retry_model_errors=True)
    assert len(model3.calls) == 1 and len(model3.calls[0]) == 4
    traj = only_traj(store, run_id)
    assert traj["outcome"] == "turn_budget"
    assert [t["status"] for t in store.turns(traj["id"])] == ["incorrect", "correct"]


def test_resume_keeps_the_cost_already_spent(store):
    reply = LLMReply(text=code("x"), tokens_in=1, tokens_out=1, cost_usd=0.04)
    model = ScriptedModel([reply, KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        solve(
            [RELU],
            cfg(turns=3, cost_budget_usd=0.05, run_name="c"),
            model,
            ScriptedEvaluator([canned("incorrect")]),
            store,
        )
    model2 = ScriptedModel([reply] * 5)
    resume("c", model2, ScriptedEvaluator([canned("incorrect")]), store)
    assert len(model2.calls) == 1  # 0.04 spent before + 0.04 -> over 0.05
    assert only_traj(store, store.get_run("c")["id"])["outcome"] == "cost_budget"


def test_evaluator_bug_is_an_error_outcome_and_a_failed_run(store):
    class Broken:
        def evaluate(self, problem, candidate_source):
            raise RuntimeError("evaluator bug")

    with pytest.raises(RuntimeError, match="evaluator bug"):
        solve([RELU, VADD], cfg(run_name="f"), ScriptedModel([code("a")]), Broken(), store)
    run = store.get_run("f")
    assert run["status"] == "failed" and only_traj(store, run["id"])["outcome"] == "error"
    assert store.turns(only_traj(store, run["id"])["id"])[0]["response"] == code("a")


def test_hardware_from_the_first_result_is_recorded_on_the_run(store):
    r = canned("correct", 1.2)
    r.hardware = HardwareInfo(device="cuda", gpu_name="NVIDIA H200", compute_capability="9.0")
    run_id = solve([RELU], cfg(turns=1), ScriptedModel([code("a")]), ScriptedEvaluator([r]), store)
    run = store.get_run(run_id)
    assert run["gpu"] == "NVIDIA H200" and run["hardware"]["compute_capability"] == "9.0"


@pytest.mark.parametrize("backend, marker", [("cuda", "load_inline"), ("triton", "@triton.jit")])
def test_backend_selects_the_task_prompt(store, backend, marker):
    model = ScriptedModel([code("a")])
    solve(
        [RELU],
        cfg(turns=1, backend=backend, precision="fp16"),
        model,
        ScriptedEvaluator([canned("incorrect")]),
        store,
    )
    task = model.calls[0][1]["content"]
    assert marker in task and "torch.float16" in task


def test_config_validation_and_round_trip():
    for bad in ({"turns": 0}, {"samples": 0}, {"context": "some"}, {"backend": "auto"}):
        with pytest.raises(ValueError):
            SolveConfig(**bad)
    c = SolveConfig(turns=3, context="last", token_budget=10)
    assert SolveConfig.from_dict({**c.__dict__, "llm": {"name": "x"}, "future_field": 1}) == c


class RetimingEvaluator(ScriptedEvaluator):
    """A scripted evaluator that can also re-time (as LocalEvaluator does), with canned re-timings."""

    def __init__(self, results, retimed):
        super().__init__(results)
        self.retimed = list(retimed)
        self.retime_calls: list[str] = []

    def retime(self, problem, candidate_source):
        self.retime_calls.append(candidate_source)
        return self.retimed[len(self.retime_calls) - 1]


def test_the_winner_is_retimed_once_and_fast_p_uses_the_retimed_figure(store):
    from kb_agent.agent.metrics import best_speedup

    evaluator = RetimingEvaluator([canned("correct", 1.5), canned("correct", 2.0), canned("incorrect")],
                                  [canned("correct", 1.8)])  # fmt: skip
    run_id = solve([RELU], cfg(turns=3), ScriptedModel([code("a"), code("b"), code("c")]), evaluator, store)
    assert len(evaluator.retime_calls) == 1 and "# b" in evaluator.retime_calls[0]  # the 2.0x turn, only
    traj = only_traj(store, run_id)
    turns = store.turns(traj["id"])
    assert turns[1]["speedup"] == 2.0 and turns[1]["retimed_speedup"] == 1.8  # beside the first figure
    assert turns[1]["retimed_status"] == "correct" and turns[1]["retimed_json"]["speedup"] == 1.8
    assert traj["best_speedup"] == 1.8 and traj["best_turn"] == 2
    assert best_speedup(store.turn_summaries(run_id)) == 1.8
    resume(run_id, ScriptedModel([]), evaluator, store)  # finished: nothing asked, nothing re-timed
    assert len(evaluator.retime_calls) == 1


def test_runs_show_and_the_viewer_say_when_the_best_figure_is_the_retimed_one(store):
    # found by a new user: the best line and a viewer cell showed the re-timed 1.8x, the turn's row and
    # the cell's tooltip the turn's own 2.0x, with nothing saying why they differ
    from kb_agent.agent import viewer
    from kb_agent.agent.report import render_show_text, show_run

    evaluator = RetimingEvaluator([canned("correct", 2.0)], [canned("correct", 1.8)])
    run_id = solve([RELU], cfg(turns=1), ScriptedModel([code("a")]), evaluator, store)
    text = render_show_text(show_run(store, run_id))
    assert "best 1.80x at turn 1 (re-timed in a fresh process; the turn's own timing read 2.00x)" in text
    html = viewer.render_html(viewer.build_view(store, run_id))
    assert "re-timed in a fresh process: 1.80x" in html


def test_a_winner_not_correct_when_retimed_does_not_count(store):
    from kb_agent.agent.metrics import best_speedup

    evaluator = RetimingEvaluator([canned("correct", 1.5), canned("correct", 3.0)], [canned("incorrect")])
    run_id = solve([RELU], cfg(turns=2), ScriptedModel([code("a"), code("b")]), evaluator, store)
    traj = only_traj(store, run_id)
    assert traj["best_speedup"] == 1.5 and traj["best_turn"] == 1
    assert best_speedup(store.turn_summaries(run_id)) == 1.5
    assert store.turns(traj["id"])[1]["retimed_status"] == "incorrect"


def test_retime_best_off_or_no_correct_turn_retimes_nothing(store):
    evaluator = RetimingEvaluator([canned("correct", 1.5)], [canned("correct", 1.4)])
    solve([RELU], cfg(turns=1, retime_best=False), ScriptedModel([code("a")]), evaluator, store)
    evaluator = RetimingEvaluator([canned("incorrect")], [canned("correct", 1.4)])
    solve([RELU], cfg(turns=1), ScriptedModel([code("a")]), evaluator, store)
    assert evaluator.retime_calls == []


def test_on_start_gets_the_trajectories_and_turns_before_the_first_turn(store):
    seen = []
    model = ScriptedModel([code("a")] * 4)
    on_turn = lambda e: seen.append(("turn", e.idx))  # noqa: E731
    solve([RELU, VADD], cfg(turns=2, samples=1), model, ScriptedEvaluator([canned("incorrect")]), store,
          on_turn=on_turn, on_start=lambda n, k: seen.append(("start", n, k)))  # fmt: skip
    assert seen[0] == ("start", 2, 2) and seen.count(("turn", 1)) == 2 and len(seen) == 5


def test_config_refuses_bad_evaluation_settings_and_maps_them():
    for bad, words in (
        ({"stage_limits": "bild=3"}, "stage limits: unknown stage 'bild'"),
        ({"precision": "fp8"}, "unknown precision"),
        ({"device": "tpu"}, "unknown device"),
    ):
        with pytest.raises(ValueError, match=words):
            SolveConfig(**bad)
    s = SolveConfig(backend="triton", device="cpu", precision="bf16", strict=False, sandbox=False,
                    stage_limits="build=7").eval_settings()  # fmt: skip
    assert (s.backend, s.device, s.precision, s.strict, s.sandbox) == ("triton", "cpu", "bf16", False, False)
    assert s.limits.build_s == 7 and s.limits.timing_s == SolveConfig().eval_settings().limits.timing_s


def test_a_reply_repeating_earlier_code_reuses_its_verdict_and_costs_no_gpu_seconds(store):
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.settings import EvalSettings

    calls = []

    def fake(job):
        calls.append(job.source)
        return EvalResult(Status.CORRECT, speedup=1.2, stages={"correctness": 1.0, "timing": 2.0})

    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fake, reuse_results=True)
    run_id = solve([RELU], cfg(turns=3, retime_best=False), ScriptedModel([code("a"), code("a"), code("b")]),
                   pool, store)  # fmt: skip
    turns = store.turns(only_traj(store, run_id)["id"])
    assert len(calls) == 2 and [t["status"] for t in turns] == ["correct"] * 3
    assert turns[1]["eval_json"]["reused"]["stages"] == {"correctness": 1.0, "timing": 2.0}
    assert turns[0]["eval_json"]["reused"] is None and turns[2]["eval_json"]["reused"] is None
    assert [r["gpu_s"] for r in sorted(store.turn_summaries(run_id), key=lambda r: r["idx"])] == [3.0, 0, 3.0]


def test_a_sample_repeating_another_samples_code_is_not_told_it_sent_that_code_before(store):
    # reuse spans the pool (every trajectory of the run), but only a conversation that holds the code
    # was sent it: sample 1's first reply repeats sample 0's, which sample 1 never saw
    from kb_agent.agent.feedback import REPEATED_CODE
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.settings import EvalSettings

    fake = lambda job: EvalResult(Status.CORRECT, speedup=1.2, stages={"timing": 2.0})  # noqa: E731
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fake, reuse_results=True)
    run_id = solve([RELU], cfg(turns=2, samples=2, retime_best=False), ScriptedModel([code("a")] * 4), pool,
                   store)  # fmt: skip
    first, second = (store.turns(only_traj(store, run_id, sample=s)["id"]) for s in (0, 1))
    assert second[0]["eval_json"]["reused"] is not None  # the verdict is reused...
    assert REPEATED_CODE not in second[0]["feedback"] and REPEATED_CODE not in first[0]["feedback"]
    assert REPEATED_CODE in first[1]["feedback"] and REPEATED_CODE in second[1]["feedback"]  # said here


def test_a_retimed_winner_counts_with_its_retimed_figure_in_the_turns_that_reused_it(store):
    # turns 2 and 3 repeat turn 1's code and get its result, so they are the same measurement: once the
    # winner (turn 1) re-times slower, its copies must not win best-of-trajectory with the stale figure
    from kb_agent.agent.metrics import best_speedup
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.settings import EvalSettings

    def fake(job):
        speedup = 1.2 if job.kind == "retime" else 1.5
        return EvalResult(Status.CORRECT, speedup=speedup, stages={"timing": 2.0})

    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fake, reuse_results=True)
    run_id = solve([RELU], cfg(turns=3), ScriptedModel([code("a")] * 3), pool, store)
    turns = store.turns(only_traj(store, run_id)["id"])
    assert [t["eval_json"]["reused"] is not None for t in turns] == [False, True, True]
    assert [t["retimed_speedup"] for t in turns] == [1.2, 1.2, 1.2]
    assert best_speedup(turns) == 1.2


def test_a_resumed_run_reuses_the_results_stored_before_the_stop_for_repeated_code(store):
    # Ctrl-C while the model is asked for turn 2; resumed, it answers turn 1's code again. The resumed
    # run's pool is new: it must still give turn 2 turn 1's stored result, as an uninterrupted run does
    from kb_agent.agent.feedback import REPEATED_CODE
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.settings import EvalSettings

    first = lambda job: EvalResult(Status.CORRECT, speedup=1.5, stages={"timing": 2.0})  # noqa: E731
    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=first, reuse_results=True)
    with pytest.raises(KeyboardInterrupt):
        solve([RELU], cfg(turns=2, run_name="r", retime_best=False), ScriptedModel([code("a"), KeyboardInterrupt()]),
              pool, store)  # fmt: skip
    again = []
    fresh = lambda job: again.append(job) or EvalResult(Status.CORRECT, speedup=9.0, stages={})  # noqa: E731
    pool2 = EvalPool(EvalSettings(device="cpu"), cpu_slots=1, run_job=fresh, reuse_results=True)
    resume("r", ScriptedModel([code("a")]), pool2, store)
    turns = store.turns(only_traj(store, store.get_run("r")["id"])["id"])
    assert again == [] and turns[1]["speedup"] == 1.5 and turns[1]["eval_json"]["reused"] is not None
    assert REPEATED_CODE in turns[1]["feedback"]
