"""Progress display for `kb-agent solve`: a bar over trajectories and turns, one line per finished turn."""

from __future__ import annotations

from kb_agent.agent.loop import TurnEvent
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_STYLE = {"correct": "green", "incorrect": "yellow", "timeout": "magenta", "no_code": "cyan"}


class TurnPrinter:
    """The loop's `on_turn` callback (prints `2/40 sample 0 turn 3/5 correct 1.42x` and advances the bar)
    and its `on_start` (`start`: sets the bar's length)."""

    def __init__(self, console: Console, total_turns: int | None = None):
        self.console = console
        self.total_turns = total_turns
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,  # piped: the turn lines alone
        )
        self.task = None

    def __enter__(self) -> TurnPrinter:
        return self

    def __exit__(self, *exc) -> None:
        if self.task is not None:
            self.progress.__exit__(*exc)

    def start(self, trajectories: int, turns: int) -> None:
        """`trajectories` are about to run, `turns` (K) at most each: the bar appears, its total their
        product. Before this call (a run refused for bad input) nothing is drawn."""
        self.total_turns = turns
        if self.task is None:
            self.progress.__enter__()
            self.task = self.progress.add_task("turns", total=None)
        self.progress.update(self.task, total=trajectories * turns)

    def __call__(self, e: TurnEvent) -> None:
        speed = f" {e.speedup:.2f}x" if e.speedup is not None else ""
        tokens = f"  tokens {e.tokens_in or 0}+{e.tokens_out or 0}" if e.tokens_in is not None else ""
        style = _STYLE.get(e.status, "red")
        self.progress.console.print(
            f"{e.problem} sample {e.sample} turn {e.idx}/{self.total_turns or '?'} [{style}]{e.status}[/]{speed}{tokens}",
            highlight=False,
        )
        if self.task is not None:
            self.progress.update(self.task, advance=1, description=f"{e.problem} turn {e.idx}")
