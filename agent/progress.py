"""Progress display for `kb-agent solve`: a bar over trajectories and turns, one line per finished turn."""

from __future__ import annotations

from kb_agent.agent.loop import TurnEvent
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_STYLE = {"correct": "green", "incorrect": "yellow", "timeout": "magenta", "no_code": "cyan"}


class TurnPrinter:
    """The `on_turn` callback of the loop: prints `L2/40 s0 turn 3/5 correct 1.42x` and advances the bar."""

    def __init__(self, console: Console, total_turns: int):
        self.console = console
        self.total_turns = total_turns
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = None

    def __enter__(self) -> TurnPrinter:
        self.progress.__enter__()
        self.task = self.progress.add_task("turns", total=None)
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def expect(self, trajectories: int) -> None:
        """Set the bar's total to the most turns `trajectories` trajectories can take."""
        self.progress.update(self.task, total=trajectories * self.total_turns)

    def __call__(self, e: TurnEvent) -> None:
        speed = f" {e.speedup:.2f}x" if e.speedup is not None else ""
        tokens = f"  tokens {e.tokens_in or 0}+{e.tokens_out or 0}" if e.tokens_in is not None else ""
        style = _STYLE.get(e.status, "red")
        self.progress.console.print(
            f"{e.problem} sample {e.sample} turn {e.idx}/{self.total_turns} [{style}]{e.status}[/]{speed}{tokens}",
            highlight=False,
        )
        self.progress.update(self.task, advance=1, description=f"{e.problem} turn {e.idx}")
