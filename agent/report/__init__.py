"""Reports over the trajectory store: best-of-trajectory fast_p per run under strict mode and under
KernelBench's rules side by side (same denominators), with strict mode's rejections per check, the
library share of the best turns, the level and the GPU; and the turn-by-turn view of a run.

Each report comes in two halves: `build` makes a JSON-serialisable dict from the store (what `--json`
prints and tests check); `text` renders it as plain text (piped output) and `terminal` as rich tables.
Nothing here prints.
"""

from kb_agent.agent.report.build import (
    ReportError,
    build_report,
    level_label,
    list_runs,
    run_section,
    show_run,
    turn_code,
)
from kb_agent.agent.report.terminal import report_renderables, runs_renderable, show_renderables
from kb_agent.agent.report.text import render_report_text, render_runs_text, render_show_text, text_table

__all__ = [
    "ReportError",
    "build_report",
    "level_label",
    "list_runs",
    "render_report_text",
    "render_runs_text",
    "render_show_text",
    "report_renderables",
    "run_section",
    "runs_renderable",
    "show_renderables",
    "show_run",
    "text_table",
    "turn_code",
]
