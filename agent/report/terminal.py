"""The terminal half of the reports: the same figures as `text`, laid out as rich tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kb_agent.agent.report import text


def _rich_table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None):
    from rich.table import Table

    table = Table(*headers, title=title, title_justify="left")
    for r in rows:
        table.add_row(*r)
    return table


def report_renderables(report: dict[str, Any], per_problem: bool = False) -> list[Any]:
    """The report as rich renderables (for a terminal): the same figures as `render_report_text`."""
    from rich.text import Text

    out: list[Any] = []
    for s in report["runs"]:
        for kind, body in text.section_blocks(s, per_problem):
            if kind == "lines":
                out.append(
                    Text("\n".join(body), style="bold" if body[:1] == text.section_header(s)[:1] else "")
                )
            else:
                title, headers, rows = body
                out.append(_rich_table(headers, rows, title))
    if len(report["runs"]) > 1:
        out.append(_rich_table(*text.comparison_rows(report), text.comparison_title(report)))
    return out


def show_renderables(shown: dict[str, Any]) -> list[Any]:
    """`show_run`'s result as rich renderables."""
    from rich.text import Text

    cost = text.shown_cost(shown)
    out: list[Any] = [Text(text.run_line(shown["run"], cost), style="bold")]
    for t in shown["trajectories"]:
        out.append(_rich_table(*text.show_rows(t, cost), text.traj_title(t)))
    return out


def runs_renderable(runs: list[dict[str, Any]]) -> Any:
    """`list_runs`'s result as a rich table."""
    return _rich_table(*text.runs_rows(runs))


__all__ = ["report_renderables", "runs_renderable", "show_renderables"]
