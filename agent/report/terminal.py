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


def report_renderables(report: dict[str, Any]) -> list[Any]:
    """The report as rich renderables (for a terminal): the same figures as `render_report_text`."""
    from rich.text import Text

    out: list[Any] = []
    for s in report["runs"]:
        out.append(Text("\n".join(text.section_header(s)), style="bold"))
        out.append(_rich_table(*text.fast_p_rows(s), text.FAST_P_TITLE))
        out.append(Text("\n".join(text.strict_lines(s))))
        if s["by_turn"] is not None:
            for rules, label in text.RULE_LABELS.items():
                out.append(_rich_table(*text.by_turn_rows(s, rules), f"{text.BY_TURN_TITLE}, {label}"))
        out.append(Text("\n".join(text.costs_and_counts(s))))
    if len(report["runs"]) > 1:
        out.append(_rich_table(*text.comparison_rows(report), text.comparison_title(report)))
    return out


def show_renderables(shown: dict[str, Any]) -> list[Any]:
    """`show_run`'s result as rich renderables."""
    from rich.text import Text

    out: list[Any] = [Text(text.run_line(shown["run"]), style="bold")]
    for t in shown["trajectories"]:
        out.append(_rich_table(*text.show_rows(t), text.traj_title(t)))
    return out


def runs_renderable(runs: list[dict[str, Any]]) -> Any:
    """`list_runs`'s result as a rich table."""
    return _rich_table(*text.runs_rows(runs))


__all__ = ["report_renderables", "runs_renderable", "show_renderables"]
