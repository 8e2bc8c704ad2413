"""The plotting half of the reports: PNG figures drawn with matplotlib (Agg, no display) from a report
dict made with `build_report(..., by_turn=True, by_budget=True)`. Nothing here reads the store.

`write_plots(report, folder)` writes, for every run of the report (several runs share each figure, one
panel or one line each, so they compare at a glance):

* `fast_p_by_turn.png`: fast_p of the best correct turn up to k against k, one line per threshold p,
  the 95 % bootstrap band around each (per problem, strict mode's verdicts, or KernelBench's rules
  where no run was strict);
* `fast_p_by_budget.png`: the same against cumulative tokens, dollars and GPU-seconds per trajectory
  (`metrics.BUDGETS`; CPU-seconds for a `--device cpu` run; no dollar panels when no run recorded a
  cost), one row of panels per run;
* `status_mix.png`: the status of each trajectory's turn k, as stacked fractions, per turn;
* `speedup_distribution.png`: each trajectory's best correct speedup: a histogram on a log axis and the
  fraction of trajectories faster than x (fast_x as a curve over x);
* `compare_runs.png` (two runs or more): fast_0 and fast_1 of every run on the same axes, against
  turn (a tick per turn of the longest run), tokens, dollars and GPU-seconds.

`budget_figure`, `speedups_figure` and `comparison_figure` return a figure without saving it (tests
read its axes).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kb_agent.agent import metrics
from kb_agent.agent.report.build import seconds_device
from kb_agent.agent.report.text import cost_recorded, gpu_label, verdicts_of

STATUS_COLOURS = {
    "correct": "#2ca02c",
    "rejected": "#9467bd",
    "incorrect": "#ff7f0e",
    "runtime_error": "#d62728",
    "timeout": "#8c564b",
    "compile_error": "#7f7f7f",
    "no_code": "#c7c7c7",
    "model_error": "#17becf",
    "pending": "#bcbd22",
    "ended": "#f4f4f4",
}
BUDGET_AXES = {"tokens": "tokens per trajectory", "cost_usd": "US dollars per trajectory",
               "gpu_s": "{device}-seconds per trajectory\n(correctness + timing stages)"}  # fmt: skip
TURN_TICKS = 20  # up to this many turns, a tick for every turn; beyond, integer ticks matplotlib spaces
COMPARE_P = (0.0, 1.0)  # the thresholds of the comparison figure
BUDGET_P = (0.0, 1.0, 1.5)  # the thresholds drawn against budgets
DPI = 110


def _figure(rows: int, cols: int, width: float = 5.2, height: float = 3.8):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _p_colours(p_values: list[float]) -> dict[float, Any]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    n = max(1, len(p_values) - 1)
    return {p: cmap(0.9 * i / n) for i, p in enumerate(p_values)}


def _run_colours(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _title(s: dict[str, Any]) -> str:
    n = s["samples"]["max"]
    unit = f"{s['problems']} problems" + (f" x {n} samples (best of {n})" if n > 1 else "")
    return f"{s['run']['name']}: level {s['level']}, {unit}"


def _rules(report: dict[str, Any]) -> str:
    """Which verdicts the figures plot: strict mode's, or KernelBench's rules where no run evaluated a turn
    in strict mode (a `--no-strict` run's strict column is its parity verdict; see `text.strict_lines`)."""
    judged = {verdicts_of(s) == "strict" for s in report["runs"]}
    if judged == {False}:
        return "KernelBench rules, strict mode off"
    if judged == {True, False}:
        return "strict mode where a run had it on, else KernelBench rules"
    return "strict mode"


def _suptitle(report: dict[str, Any], what: str) -> str:
    run = report["runs"][0]["run"]
    return f"{what}\nGPU: {gpu_label(run)}, precision: {run['precision']}"


def _band(ax, x, fs: list[dict[str, Any]], colour, label: str, step: bool = False) -> None:
    """A line of fast_p values with its 95 % band (where intervals were drawn)."""
    y = [f["value"] for f in fs]
    kw = {"drawstyle": "steps-post"} if step else {"marker": "o", "markersize": 3.5}
    ax.plot(x, y, color=colour, label=label, linewidth=1.6, **kw)
    if all(f.get("ci95") is not None for f in fs):
        lo = [f["ci95"][0] for f in fs]
        hi = [f["ci95"][1] for f in fs]
        ax.fill_between(x, lo, hi, color=colour, alpha=0.13, linewidth=0, step="post" if step else None)


def _fast_p_axes(ax, xlabel: str) -> None:
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fast_p (fraction of problems)")
    ax.grid(True, alpha=0.3)


def _need(report: dict[str, Any], field: str) -> None:
    if any(s.get(field) is None for s in report["runs"]):
        raise ValueError(f"plots need a report built with {field}=True")


def _budget_axis(budget: str, runs: list[dict[str, Any]]) -> str:
    """A budget axis's label; seconds on the runs' device ("GPU", "CPU", or both when they differ)."""
    devices = sorted({seconds_device(s["run"]) for s in runs}, reverse=True)
    return BUDGET_AXES[budget].format(device=" or ".join(devices))


def _budgets(runs: list[dict[str, Any]]) -> list[str]:
    """The budgets drawn: all of `metrics.BUDGETS`, dollars only when some run recorded a cost."""
    return [b for b in metrics.BUDGETS if b != "cost_usd" or any(cost_recorded(s) for s in runs)]


def _cost_note(runs: list[dict[str, Any]], shown: str) -> str:
    """What a budget figure says of dollars: nothing drawn ("no cost recorded"), or `shown`."""
    return "no cost recorded" if "cost_usd" not in _budgets(runs) else shown


def _turn_ticks(ax, max_turn: int) -> None:
    """Integer ticks on a turn axis: every turn 1..max_turn, the last included (TURN_TICKS at most)."""
    from matplotlib.ticker import MaxNLocator

    if max_turn <= TURN_TICKS:
        ax.set_xticks(range(1, max(1, max_turn) + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_by_turn(report: dict[str, Any], path: Path) -> Path:
    """fast_p against turn k, a panel per run, a line per threshold with its 95 % interval as error bars
    (each threshold's shifted a little sideways, so the intervals do not hide one another)."""
    _need(report, "by_turn")
    runs = report["runs"]
    cols = min(3, len(runs))
    fig, axes = _figure(math.ceil(len(runs) / cols), cols, width=5.0 if cols > 1 else 6.8, height=4.2)
    ps = report["p_values"]
    colours = _p_colours(ps)
    for ax, s in zip(axes.flat, runs, strict=False):
        ks = [r["k"] for r in s["by_turn"]]
        for q, p in enumerate(ps):
            dodge = 0.28 * (q - (len(ps) - 1) / 2) / max(1, len(ps) - 1)
            fs = [r["fast_p"][q] for r in s["by_turn"]]
            x = [k + dodge for k in ks]
            y = [f["value"] for f in fs]
            yerr = None
            if all(f.get("ci95") is not None for f in fs):
                yerr = [[v - f["ci95"][0] for v, f in zip(y, fs, strict=True)],
                        [f["ci95"][1] - v for v, f in zip(y, fs, strict=True)]]  # fmt: skip
            ax.errorbar(x, y, yerr=yerr, color=colours[p], marker="o", markersize=3.5, linewidth=1.5, capsize=2,
                        elinewidth=0.9, alpha=0.95, label=f"speedup > {p:g}" + (" (correct)" if p == 0 else ""))  # fmt: skip
        _fast_p_axes(ax, "turn k (best correct turn up to k)")
        _turn_ticks(ax, max(ks, default=1))
        ax.set_title(_title(s), fontsize=10)
    for ax in list(axes.flat)[len(runs) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8, title="fast_p", frameon=False)
    fig.suptitle(
        _suptitle(report, f"fast_p by turn ({_rules(report)}, per problem; bars: 95% bootstrap CI)"),
        fontsize=11,
    )
    fig.savefig(path, dpi=DPI)
    return path


def plot_by_budget(report: dict[str, Any], path: Path) -> Path:
    """`budget_figure` as a PNG."""
    budget_figure(report).savefig(path, dpi=DPI)
    return path


def budget_figure(report: dict[str, Any]):
    """fast_p against cumulative tokens, dollars and GPU-seconds (CPU-seconds for a CPU run), a row of
    panels per run; three thresholds (BUDGET_P: correct, faster than the reference, 1.5x) with their
    95 % bands, so the bands stay readable (the text report and the JSON have every threshold). No dollar
    panels when no run recorded a cost (the title says so)."""
    _need(report, "by_budget")
    runs = report["runs"]
    budgets = _budgets(runs)
    fig, axes = _figure(len(runs), len(budgets), width=4.6, height=3.6)
    colours = dict(zip(BUDGET_P, _run_colours(len(BUDGET_P)), strict=True))
    for row, s in zip(axes, runs, strict=True):
        for ax, budget in zip(row, budgets, strict=True):
            curve = s["by_budget"][budget]
            _fast_p_axes(ax, _budget_axis(budget, [s]))
            ax.set_title(_title(s), fontsize=9)
            if not _spent(curve):
                _nothing(ax, f"no {'cost' if budget == 'cost_usd' else budget} recorded")
                continue
            for p in BUDGET_P:
                q = report["p_values"].index(p)
                _curve(ax, curve, q, colours[p], f"speedup > {p:g}" + (" (correct)" if p == 0 else ""))
            _money(ax, budget)
    handles, labels = next((ax.get_legend_handles_labels() for ax in axes.flat if ax.lines), ([], []))
    fig.legend(handles, labels, loc="outside right center", fontsize=8, title="fast_p", frameon=False)
    note = _cost_note(runs, "a run without a recorded cost says so")
    fig.suptitle(_suptitle(report, f"fast_p against what was spent ({_rules(report)}, per problem; each trajectory cut at the "
                                   f"budget;\nbands: 95% bootstrap CI; {note})"))  # fmt: skip
    return fig


def _spent(curve: list[dict[str, Any]]) -> bool:
    return bool(curve) and curve[-1]["budget"] > 0


def _curve(ax, curve: list[dict[str, Any]], q: int, colour, label: str) -> None:
    """A budget curve as steps from (0, 0): nothing is solved before anything is spent."""
    zero = {**curve[0]["fast_p"][q], "value": 0.0, "ci95": (0.0, 0.0)}
    _band(
        ax,
        [0.0] + [c["budget"] for c in curve],
        [zero] + [c["fast_p"][q] for c in curve],
        colour,
        label,
        step=True,
    )


def _nothing(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])


def _money(ax, budget: str) -> None:
    """Budget-axis ticks: at most 6, dollars with `$`, tokens in thousands (`20k`)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    if budget not in metrics.BUDGETS:
        return
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    if budget == "cost_usd":
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:g}"))
    elif budget == "tokens":
        ax.xaxis.set_major_formatter(
            FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}")
        )


def plot_status_mix(report: dict[str, Any], path: Path) -> Path:
    """The status of turn k of each trajectory, as stacked fractions, a panel per run."""
    runs = report["runs"]
    cols = min(3, len(runs))
    fig, axes = _figure(math.ceil(len(runs) / cols), cols, width=5.6 if cols > 1 else 7.0, height=4.2)
    for ax, s in zip(axes.flat, runs, strict=False):
        mix = s["status_by_turn"]
        seen = [st for st in (*metrics.STATUS_ORDER, "ended") if any(r["counts"].get(st) for r in mix)
                or (st == "ended" and any(r["ended"] for r in mix))]  # fmt: skip
        seen += sorted({k for r in mix for k in r["counts"]} - set(seen))
        ks = [r["k"] for r in mix]
        bottom = [0.0] * len(mix)
        for st in seen:
            frac = [
                (r["ended"] if st == "ended" else r["counts"].get(st, 0)) / max(1, r["trajectories"])
                for r in mix
            ]
            ax.bar(ks, frac, bottom=bottom, color=STATUS_COLOURS.get(st, "#333333"), label=st.replace("_", " "),
                   edgecolor="0.55" if st == "ended" else "white", linewidth=0.6, width=0.7)  # fmt: skip
            bottom = [b + f for b, f in zip(bottom, frac, strict=True)]
        ax.set_ylim(0, 1)
        ax.set_xticks(ks)
        ax.set_xlabel("turn k")
        ax.set_ylabel("fraction of trajectories")
        ax.set_title(_title(s), fontsize=10)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    for ax in list(axes.flat)[len(runs) :]:
        ax.set_visible(False)
    fig.suptitle(
        _suptitle(
            report, f"status of each trajectory's turn k ({_rules(report)}; ended: stopped before turn k)"
        )
    )
    fig.savefig(path, dpi=DPI)
    return path


def plot_speedups(report: dict[str, Any], path: Path) -> Path:
    """`speedups_figure` as a PNG."""
    speedups_figure(report).savefig(path, dpi=DPI)
    return path


def speedups_figure(report: dict[str, Any]):
    """Each trajectory's best correct speedup (strict): a histogram on a log axis, and the fraction of
    trajectories faster than x, one line per run; the axis always reaches 1x (the dashed line). With no
    correct trajectory the panels say so, over an empty count axis from 0."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    runs = report["runs"]
    fig, axes = _figure(1, 2, width=6.0)
    hist, surv = axes[0]
    colours = _run_colours(len(runs))
    known = {s["run"]["name"]: sorted(x for x in s["best_speedups"]["strict"] if x is not None and x > 0)
             for s in runs}  # fmt: skip
    every = [x for xs in known.values() for x in xs]
    lo, hi = _speedup_range(every)
    bins = np.logspace(math.log10(lo), math.log10(hi), 25)
    for colour, s in zip(colours, runs, strict=True):
        xs, n = known[s["run"]["name"]], len(s["best_speedups"]["strict"])
        label = f"{s['run']['name']} ({len(xs)} of {n} trajectories correct)"
        if xs:
            hist.hist(xs, bins=bins, histtype="step", linewidth=1.8, color=colour, label=label)
            grid = np.logspace(math.log10(lo), math.log10(hi), 200)
            surv.plot(grid, [sum(1 for x in xs if x > g) / n for g in grid], color=colour, linewidth=1.8,
                      label=label)  # fmt: skip
        else:  # a legend entry all the same, on both panels
            for ax in (hist, surv):
                ax.plot([], [], color=colour, label=label + ": none")
    for ax in (hist, surv):
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        _speedup_ticks(ax, lo, hi)
        ax.axvline(1.0, color="0.3", linestyle="--", linewidth=1)
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("best speedup of the trajectory (reference ms / candidate ms)")
        ax.legend(fontsize=8)
        if not every:
            ax.text(0.5, 0.5, "no correct trajectory", ha="center", va="center", transform=ax.transAxes)
    hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    hist.set_ylim(0, None if every else 1)
    hist.set_ylabel("trajectories")
    hist.set_title("distribution (dashed: as fast as the reference)", fontsize=10)
    surv.set_ylabel("fraction of all trajectories faster than x")
    surv.set_ylim(-0.02, 1.02)
    surv.set_title("fraction faster than x (fast_x, per trajectory)", fontsize=10)
    fig.suptitle(_suptitle(report, f"best correct speedup of each trajectory ({_rules(report)})"))
    return fig


SPEEDUP_TICKS = 7  # labelled ticks on a speedup axis at most (more crowd one another)


def _speedup_range(values: list[float]) -> tuple[float, float]:
    """The limits of a speedup axis: the values and 1x (the reference), a quarter decade beyond."""
    lo, hi = min([*values, 1.0]), max([*values, 1.0])
    return lo / 10**0.25, hi * 10**0.25


def _speedup_ticks(ax, lo: float, hi: float) -> None:
    """Labelled ticks `0.01x`, `1x`, `2x` between lo and hi: the densest of 1-2-3-5-7, 1-2-5, 1-3 steps
    and decades that gives SPEEDUP_TICKS or fewer, every other decade (and so on) beyond SPEEDUP_TICKS decades, so
    that the labels of a CPU run's 0.001x-0.05x do not run into one another; unlabelled minor ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    inside = lambda steps: [m * 10.0**e for e in decades for m in steps if lo <= m * 10.0**e <= hi]  # noqa: E731
    ticks = next((t for steps in ((1, 2, 3, 5, 7), (1, 2, 5), (1, 3), (1,)) if len(t := inside(steps)) <= SPEEDUP_TICKS),
                 None)  # fmt: skip
    if ticks is None:  # many decades: every k-th one, 1x among them
        k = math.ceil(len(inside((1,))) / SPEEDUP_TICKS)
        ticks = [10.0**e for e in decades if e % k == 0 and lo <= 10.0**e <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(LogLocator(subs=tuple(range(2, 10))))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))


def plot_comparison(report: dict[str, Any], path: Path) -> Path:
    """`comparison_figure` as a PNG."""
    comparison_figure(report).savefig(path, dpi=DPI)
    return path


def comparison_figure(report: dict[str, Any]):
    """fast_0 and fast_1 of every run on shared axes: against turn (a tick per turn of the longest run),
    tokens, dollars (when some run recorded a cost) and GPU- or CPU-seconds."""
    _need(report, "by_turn")
    _need(report, "by_budget")
    runs = report["runs"]
    axes_x = ["turn", *_budgets(runs)]
    fig, axes = _figure(len(COMPARE_P), len(axes_x), width=4.2, height=3.5)
    colours = _run_colours(len(runs))
    max_turn = max((r["k"] for s in runs for r in s["by_turn"]), default=1)
    for row, p in zip(axes, COMPARE_P, strict=True):
        q = report["p_values"].index(p)
        for ax, xname in zip(row, axes_x, strict=True):
            _fast_p_axes(ax, "turn k" if xname == "turn" else _budget_axis(xname, runs))
            ax.set_ylabel(f"fast_{p:g} ({'correct' if p == 0 else f'faster than {p:g}x'})")
            for colour, s in zip(colours, runs, strict=True):
                if xname == "turn":
                    ks = [r["k"] for r in s["by_turn"]]
                    _band(ax, ks, [r["fast_p"][q] for r in s["by_turn"]], colour, s["run"]["name"])
                elif _spent(s["by_budget"][xname]):
                    _curve(ax, s["by_budget"][xname], q, colour, s["run"]["name"])
            if xname == "turn":
                _turn_ticks(ax, max_turn)
            _money(ax, xname)
            if not ax.lines:
                _nothing(ax, "not recorded")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8, title="run", frameon=False)
    note = _cost_note(runs, "a run without a recorded cost has no dollar line")
    fig.suptitle(
        _suptitle(report, f"runs compared ({_rules(report)}, per problem; bands: 95% bootstrap CI; {note})")
    )
    return fig


def write_plots(report: dict[str, Any], folder: str | Path) -> list[Path]:
    """Write the report's figures as PNGs into `folder` (created if missing); return their paths.

    Raises:
        ValueError: the report was built without `by_turn=True` and `by_budget=True`.
        OSError: the folder cannot be made or written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        plot_by_turn(report, folder / "fast_p_by_turn.png"),
        plot_by_budget(report, folder / "fast_p_by_budget.png"),
        plot_status_mix(report, folder / "status_mix.png"),
        plot_speedups(report, folder / "speedup_distribution.png"),
    ]
    if len(report["runs"]) > 1:
        paths.append(plot_comparison(report, folder / "compare_runs.png"))
    return paths


__all__ = ["budget_figure", "comparison_figure", "speedups_figure", "write_plots"]
