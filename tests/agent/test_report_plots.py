"""The report's figures as a reader sees them (issue 17): tick labels that do not overlap, what an empty
figure says, a tick for every turn, and CPU runs and runs without a price labelled as what they are.
Each test draws the figure and reads its axes."""

import os
import sys

import pytest
from kb_agent.agent.report import build_report, render_report_text
from kb_agent.agent.report.plots import budget_figure, comparison_figure, speedups_figure
from kb_agent.agent.store import Store

sys.path.insert(0, os.path.dirname(__file__))
from test_report_study import SAMPLES, add_run  # noqa: E402


@pytest.fixture
def store():
    s = Store(os.environ["KB_DB"])
    yield s
    s.close()


def report(store, *names):
    return build_report(store, list(names), by_turn=True, by_budget=True, resamples=50)


def tick_labels(ax):
    """The x tick labels drawn inside the axis's view, as (text, window extent) left to right."""
    fig = ax.figure
    fig.canvas.draw()
    lo, hi = sorted(ax.get_xlim())
    ticks = zip(ax.xaxis.get_majorticklocs(), ax.get_xticklabels(), strict=True)
    shown = [t for loc, t in ticks if lo <= loc <= hi and t.get_visible() and t.get_text()]
    renderer = fig.canvas.get_renderer()
    return sorted(((t.get_text(), t.get_window_extent(renderer)) for t in shown), key=lambda x: x[1].x0)


def test_speedup_ticks_of_a_cpu_run_do_not_overlap_and_mark_1x(store):
    # a CPU run's speedups: 0.0008x to 0.05x (and one problem never correct)
    speedups = [0.0008, 0.0031, 0.012, 0.05]
    add_run(store, "cpu", [[[("correct", x)]] for x in speedups] + [[[("incorrect", None)]]], device="cpu")
    fig = speedups_figure(report(store, "cpu"))
    for ax in fig.axes[:2]:
        labels = tick_labels(ax)
        assert "1x" in [text for text, _ in labels]  # the dashed as-fast-as-the-reference line
        assert len(labels) >= 3
        for (a, ea), (b, eb) in zip(labels, labels[1:], strict=False):
            assert ea.x1 < eb.x0, f"tick labels {a} and {b} overlap"
        lo, hi = ax.get_xlim()
        assert lo <= min(speedups) and hi >= 1.0


def test_no_correct_trajectory_says_so_with_an_axis_from_0_and_no_empty_legend(store):
    add_run(store, "none", [[[("incorrect", None), ("compile_error", None)]]] * 2)
    fig = speedups_figure(report(store, "none"))
    hist, surv = fig.axes[:2]
    assert hist.get_ylim()[0] == 0
    for ax in (hist, surv):
        assert "no correct trajectory" in [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        assert legend is None or [t.get_text() for t in legend.get_texts()]


def test_runs_compared_have_a_tick_for_every_turn_of_the_longest(store):
    add_run(store, "four", [[[("incorrect", None)] * 3 + [("correct", 1.5)]]])
    add_run(store, "three", [[[("incorrect", None)] * 2 + [("correct", 1.2)]]])
    fig = comparison_figure(report(store, "four", "three"))
    turn_axes = [ax for ax in fig.axes if ax.get_xlabel() == "turn k"]
    assert len(turn_axes) == 2
    for ax in turn_axes:
        assert [text for text, _ in tick_labels(ax)] == ["1", "2", "3", "4"]


def xlabels(fig):
    return [ax.get_xlabel() for ax in fig.axes if ax.get_visible()]


def test_a_cpu_run_without_a_price_has_cpu_seconds_and_no_dollar_axis(store):
    add_run(store, "cpu", SAMPLES, device="cpu", cost=None)
    add_run(store, "cpu2", SAMPLES, device="cpu", cost=0.0)
    for fig in (budget_figure(report(store, "cpu")), comparison_figure(report(store, "cpu", "cpu2"))):
        labels = " ".join(xlabels(fig))
        assert "CPU-seconds" in labels and "GPU-seconds" not in labels
        assert "dollars" not in labels
        assert "no cost recorded" in fig.get_suptitle()
    # a priced GPU run keeps its dollar axis and its GPU-seconds
    add_run(store, "gpu", SAMPLES)
    labels = " ".join(xlabels(budget_figure(report(store, "gpu"))))
    assert "US dollars" in labels and "GPU-seconds" in labels


def strict_run(store, name):
    """A run whose every turn strict mode judged (and passed: an empty list of failed checks)."""
    rid = add_run(store, name, SAMPLES)
    with store.db.conn:
        store.db.conn.execute(
            "UPDATE turns SET failed_checks = '[]' WHERE trajectory_id IN "
            "(SELECT id FROM trajectories WHERE run_id = ?)",
            [rid],
        )
    return rid


def test_titles_name_kernelbench_rules_when_no_run_was_strict(store):
    """A --no-strict run's verdicts are KernelBench's: a title saying "strict mode" misread them (seen on
    the H200: a parity sweep's figures all said strict)."""
    add_run(store, "parity", SAMPLES)
    strict_run(store, "strict")
    for names, want in ((("parity",), "KernelBench rules, strict mode off"), (("strict",), "(strict mode"),
                        (("parity", "strict"), "strict mode where a run had it on, else KernelBench rules")):  # fmt: skip
        rep = report(store, *names)
        for fig in (
            budget_figure(rep),
            speedups_figure(rep),
            *([comparison_figure(rep)] if len(names) > 1 else []),
        ):
            assert want in fig.get_suptitle(), (names, fig.get_suptitle())
    assert "strict mode off" not in budget_figure(report(store, "strict")).get_suptitle()
    # the text tables that name one rule say the same
    texts = {
        n: render_report_text(build_report(store, [n], by_budget=True, resamples=0))
        for n in ("parity", "strict")
    }
    assert "(KernelBench rules; strict mode off; each trajectory cut" in texts["parity"]
    assert "(strict; each trajectory cut" in texts["strict"] and "strict mode off;" not in texts["strict"]
