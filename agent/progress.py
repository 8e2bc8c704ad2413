"""Progress display for `kb-agent solve`: one line per finished turn, and below them one live display of
the sweep (a bar over turns; trajectories done of all; evaluations in flight on each slot of the pool;
GPU busy share; ETA). Piped (not a terminal), only the turn lines are printed."""

from __future__ import annotations

import threading
import time
from typing import Any

from kb_agent.agent.loop import TrajectoryEnd, TurnEvent
from kb_agent.agent.report.text import fmt_speedup
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

_STYLE = {"correct": "green", "incorrect": "yellow", "timeout": "magenta", "no_code": "cyan"}


class _SweepProgress(Progress):
    """A rich Progress whose live area also shows `status()` (a renderable) under the bar."""

    def __init__(self, *columns: Any, status: Any, **kwargs: Any):
        self._status = status  # before Progress.__init__, which renders once
        super().__init__(*columns, **kwargs)

    def get_renderable(self):
        return Group(self.make_tasks_table(self.tasks), self._status())


class TurnPrinter:
    """The loop's `on_turn` callback (prints `2/40 sample 0 turn 3/5 correct 1.42x` and advances the bar),
    its `on_start` (`start`: sets the bar's length), its `on_trajectory` (`trajectory_done`) and the
    job's `on_evaluator` (`watch`: the pool whose slots the display shows). Safe to call from the
    loop's threads. `model_down`: why the run stopped asking the model, once a trajectory said so
    (`TrajectoryEnd.reason`), for the line the command ends with."""

    def __init__(self, console: Console, total_turns: int | None = None):
        self.console = console
        self.total_turns = total_turns
        self.task = None
        self.evaluator: Any = None
        self._lock = threading.Lock()
        self.trajectories = 0
        self.finished = 0
        self.turns_done = 0
        self._turns_of: dict[int, int] = {}  # trajectory id -> turns done in this session
        self._ended: set[int] = set()
        self.model_down: str | None = None
        self._t0: float | None = None
        self.progress = _SweepProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            refresh_per_second=4,
            disable=not console.is_terminal,  # piped: the turn lines alone
            status=lambda: Text(self.status_line(), no_wrap=False),
        )

    def __enter__(self) -> TurnPrinter:
        return self

    def __exit__(self, *exc) -> None:
        if self.task is not None:
            self.progress.__exit__(*exc)

    def watch(self, evaluator: Any) -> None:
        """Show the slots of `evaluator` (an `EvalPool`; one without `slots()` shows none)."""
        self.evaluator = evaluator

    def start(self, trajectories: int, turns: int) -> None:
        """`trajectories` are about to run, `turns` (K) at most each: the bar appears, its total their
        product. Before this call (a run refused for bad input) nothing is drawn."""
        with self._lock:
            self.total_turns, self.trajectories, self._t0 = turns, trajectories, time.monotonic()
        if self.task is None:
            self.progress.__enter__()
            self.task = self.progress.add_task("turns", total=None)
        self.progress.update(self.task, total=trajectories * turns)

    def __call__(self, e: TurnEvent) -> None:
        speed = f" {fmt_speedup(e.speedup)}" if e.speedup is not None else ""
        if getattr(e.result, "reused", None) is not None:  # the same code as an earlier turn: not evaluated
            speed += " (reused)"
        tokens = f"  tokens {e.tokens_in or 0}+{e.tokens_out or 0}" if e.tokens_in is not None else ""
        style = _STYLE.get(e.status, "red")
        with self._lock:
            self.turns_done += 1
            self._turns_of[e.trajectory_id] = self._turns_of.get(e.trajectory_id, 0) + 1
        self.progress.console.print(
            f"{e.problem} sample {e.sample} turn {e.idx}/{self.total_turns or '?'} [{style}]{e.status}[/]{speed}{tokens}",
            highlight=False,
        )
        if self.task is not None:
            self.progress.update(self.task, advance=1, description=f"{e.problem} turn {e.idx}")

    def trajectory_done(self, end: TrajectoryEnd) -> None:
        """A trajectory ended (any outcome): it counts as done, and the turns it will not run leave the ETA."""
        with self._lock:
            self.model_down = self.model_down or end.reason
            if end.trajectory_id not in self._ended:
                self._ended.add(end.trajectory_id)
                self.finished += 1
        if end.retimed_speedup is not None:  # what report and fast_p use: say so where the turns were shown
            self.progress.console.print(
                f"{end.problem} sample {end.sample}: best turn re-timed in a fresh process "
                f"{fmt_speedup(end.retimed_speedup)} (the figure fast_p and report use)",
                highlight=False,
            )

    def eta_s(self) -> float | None:
        """Seconds left at this session's pace (turns done per second so far) over the turns left, each
        unfinished trajectory counted with all its K turns; None before the first turn."""
        with self._lock:
            if not self.turns_done or self._t0 is None or not self.total_turns:
                return None
            elapsed = time.monotonic() - self._t0
            unfinished = self.trajectories - self.finished
            done_open = sum(n for t, n in self._turns_of.items() if t not in self._ended)
            left = max(0, unfinished * self.total_turns - done_open)
            return elapsed / self.turns_done * left

    def status_line(self) -> str:
        """`trajectories 3/20 done · turns 14 · gpu0 2/40 evaluate 12s · gpu1 idle · waiting 2 · GPU busy
        81% · ETA 4m10s`: what the live display shows under the bar."""
        with self._lock:
            parts = [f"trajectories {self.finished}/{self.trajectories} done", f"turns {self.turns_done}"]
        slots = getattr(self.evaluator, "slots", None)
        if callable(slots):
            for s in slots():
                parts.append(f"{s.name} {s.job} {s.since_s:.0f}s" if s.job else f"{s.name} idle")
            waiting = self.evaluator.waiting()
            if waiting:
                parts.append(f"waiting {waiting}")
            busy = self.evaluator.gpu_busy()
            if busy is not None:
                parts.append(f"GPU busy {busy:.0%}")
        eta = self.eta_s()
        parts.append("ETA " + (_duration(eta) if eta is not None else "?"))
        return " · ".join(parts)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
