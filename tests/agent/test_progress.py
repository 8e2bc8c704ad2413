"""The sweep's progress display: turn lines, and a live area with trajectories done, the pool's slots,
GPU busy share and ETA (on a terminal only)."""

import io
import threading

from kb_agent.agent.llm import ScriptedModel
from kb_agent.agent.loop import SolveConfig, TrajectoryEnd, TurnEvent, solve
from kb_agent.agent.progress import TurnPrinter
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.evaluator.pool import EvalJob, EvalPool
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import resolve
from rich.console import Console

TOY = resolve("toy")
CODE = "```python\nclass ModelNew:\n    pass\n```"


def event(traj: int, idx: int, status: str = "correct") -> TurnEvent:
    return TurnEvent(
        "r", traj, f"toy/p{traj}", 0, idx, status, 1.5 if status == "correct" else None, 10, 5, 0.0
    )


def test_the_status_line_shows_trajectories_slots_gpu_busy_and_eta(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    release = threading.Event()
    pool = EvalPool(EvalSettings(device="cuda"), run_job=lambda job: release.wait(10))
    printer = TurnPrinter(Console(file=io.StringIO()))
    printer.watch(pool)
    printer.start(trajectories=2, turns=3)
    future = pool.submit(EvalJob(TOY[0], "", pool.settings))
    while pool.slots()[0].job is None:
        pass
    printer(event(1, 1))
    line = printer.status_line()
    assert "trajectories 0/2 done" in line and "turns 1" in line
    assert "gpu0 toy/relu evaluate" in line and "gpu1 idle" in line and "GPU busy" in line
    assert "ETA " in line and "ETA ?" not in line
    release.set()
    future.result(timeout=10)
    printer.trajectory_done(TrajectoryEnd("r", 1, "toy/p1", 0, "turn_budget"))
    printer.trajectory_done(TrajectoryEnd("r", 1, "toy/p1", 0, "turn_budget"))  # counted once
    assert "trajectories 1/2 done" in printer.status_line()


def test_eta_counts_the_turns_left_of_unfinished_trajectories():
    printer = TurnPrinter(Console(file=io.StringIO()))
    printer.start(trajectories=2, turns=4)
    assert printer.eta_s() is None  # no pace yet
    printer(event(1, 1))
    printer(event(1, 2))
    printer.trajectory_done(TrajectoryEnd("r", 1, "toy/p1", 0, "token_budget"))  # ended early: 2 turns less
    printer._t0 -= 10  # 10 s for 2 turns: 5 s a turn
    assert 19 <= printer.eta_s() <= 21  # trajectory 2: 4 turns left, 5 s each


def test_a_terminal_shows_the_live_area_and_a_pipe_only_the_turn_lines():
    tty = io.StringIO()
    with TurnPrinter(Console(file=tty, force_terminal=True, width=200)) as printer:
        printer.start(1, 2)
        printer(event(1, 1))
        printer.progress.refresh()
    assert "trajectories 0/1 done" in tty.getvalue() and "toy/p1 sample 0 turn 1/2" in tty.getvalue()
    pipe = io.StringIO()
    with TurnPrinter(Console(file=pipe)) as printer:
        printer.start(1, 2)
        printer(event(1, 1))
    assert pipe.getvalue().splitlines() == ["toy/p1 sample 0 turn 1/2 correct 1.50x  tokens 10+5"]


def test_a_slow_correct_turn_prints_its_speedup_not_0_00x():
    # a CPU run's Triton kernels under the interpreter run at 0.0003x: the turn line read `0.00x`
    pipe = io.StringIO()
    with TurnPrinter(Console(file=pipe)) as printer:
        printer.start(1, 1)
        printer(TurnEvent("r", 1, "toy/relu", 0, 1, "correct", 0.00032, 10, 5, 0.0))
    assert pipe.getvalue().splitlines() == ["toy/relu sample 0 turn 1/1 correct 0.00032x  tokens 10+5"]


def test_a_sweep_reports_every_trajectory_end_to_the_printer(tmp_path):
    printer = TurnPrinter(Console(file=io.StringIO()))
    with Store(tmp_path / "kb.sqlite") as store:
        cfg = SolveConfig(turns=2, backend="triton", device="cpu", gpu_name="x", arch="9.0")
        solve(TOY, cfg, ScriptedModel([CODE] * 2, by_turn=True), ScriptedEvaluator([canned("correct", 1.2)]),
              store, on_turn=printer, on_start=printer.start, on_trajectory=printer.trajectory_done, jobs=3)  # fmt: skip
    assert printer.finished == 5 and printer.turns_done == 10
    assert printer.status_line().startswith("trajectories 5/5 done · turns 10")


def test_a_turn_that_reused_an_earlier_result_says_so_in_its_line():
    # six turns of one kernel all read `correct 0.00028x`: the line did not say that five were not evaluated
    from kb_agent.evaluator.result import EvalResult, Status

    reused = EvalResult(Status.CORRECT, speedup=1.5, reused={"stages": {"timing": 1.0}, "child_start": {}})
    pipe = io.StringIO()
    with TurnPrinter(Console(file=pipe)) as printer:
        printer.start(1, 2)
        printer(TurnEvent("r", 1, "toy/relu", 0, 2, "correct", 1.5, 10, 5, 0.0, result=reused))
    assert pipe.getvalue().splitlines() == ["toy/relu sample 0 turn 2/2 correct 1.50x (reused)  tokens 10+5"]
