"""A run as one self-contained HTML page: a problems x turns grid coloured by status; a cell opens the
turn's reply, the diff of its code against the previous turn's, the feedback the model read next and the
evaluation.

    from kb_agent.agent.viewer import write_view
    write_view(store, "my-run", "my-run.html")     # open it in any browser; it fetches nothing

The page holds everything inline (CSS, one small script, the text); it makes no network request, and its
Content-Security-Policy forbids any (`default-src 'none'`) and lets only its own script run (by hash).
Model replies, code and feedback are untrusted text: every value is HTML-escaped where it is written,
and the script only shows and hides sections, so no stored text ever becomes markup or code. A turn
opens by clicking its cell, or from the address: `page.html#t-<turn id>`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kb_agent.agent.export import eval_summary, file_stem
from kb_agent.agent.store import Store
from kb_agent.problems.errors import UsageError

# status -> (cell label, background colour); text on every colour is white but for the light ones
STATUS_STYLE: dict[str, tuple[str, str]] = {
    "correct": ("ok", "#23864a"),
    "rejected": ("rej", "#7d3c98"),
    "incorrect": ("wrong", "#d4a017"),
    "runtime_error": ("run", "#d35400"),
    "compile_error": ("build", "#b03a2e"),
    "timeout": ("t/o", "#1f5f8b"),
    "no_code": ("none", "#a6acaf"),
    "model_error": ("llm", "#3d4b59"),
    "pending": ("…", "#ffffff"),
}
_LIGHT = ("incorrect", "no_code", "pending")


def e(value: Any) -> str:
    """`value` as text safe anywhere in HTML, attribute values included (`&`, `<`, `>`, `"`, `'`)."""
    return html.escape("" if value is None else str(value), quote=True)


def code_diff(previous: str | None, code: str | None, prev_label: str, label: str) -> list[str]:
    """The unified diff (3 lines of context) from `previous` to `code`, one string per line; [] when
    either is None or they are the same."""
    if previous is None or code is None:
        return []
    lines = difflib.unified_diff(previous.splitlines(), code.splitlines(), prev_label, label, lineterm="")
    return list(lines)


def build_view(store: Store, run_ref: str) -> dict[str, Any]:
    """What the page shows, as plain data: `run` (id, name, model, backend, precision, gpu, device,
    status), `max_turn`, and `rows`, one per trajectory (problem, name, level, sample, outcome,
    best_turn, best_speedup, `turns`: idx -> the stored turn with `diff` (vs the latest earlier turn
    with code, `diff_base` its index), `summary` (one line) and `rescored` (the latest rescoring or
    None)). Raises StoreError for an unknown run."""
    run = store.get_run(run_ref)
    latest: dict[int, dict[str, Any]] = {}
    for r in store.rescores(run["id"]):
        latest[r["turn_id"]] = r
    turns_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in store.run_turns(run["id"]):
        turns_of[t["trajectory_id"]].append(t)
    rows = []
    for traj in store.trajectories(run["id"]):
        cells: dict[int, dict[str, Any]] = {}
        last_code: tuple[int, str] | None = None
        for t in turns_of[traj["id"]]:
            base = last_code
            diff = code_diff(base[1] if base else None, t["code"], f"turn {base[0]}" if base else "",
                             f"turn {t['idx']}")  # fmt: skip
            cells[t["idx"]] = {**t, "diff": diff, "diff_base": base[0] if base else None,
                               "summary": eval_summary(t), "rescored": latest.get(t["id"])}  # fmt: skip
            if t["code"] is not None:
                last_code = (t["idx"], t["code"])
        rows.append({
            "problem": traj["problem_key"], "name": traj["problem_name"], "level": traj["level"],
            "sample": traj["sample"], "outcome": traj["outcome"], "best_turn": traj["best_turn"],
            "best_speedup": traj["best_speedup"], "turns": cells,
        })  # fmt: skip
    keys = ("id", "name", "model", "backend", "precision", "gpu", "status", "created")
    return {
        "run": {**{k: run.get(k) for k in keys}, "device": (run.get("config") or {}).get("device")},
        "max_turn": max((i for r in rows for i in r["turns"]), default=0),
        "rows": rows,
    }


# ---------------------------------------------------------------- rendering

_CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1c2833;background:#f4f6f7}
header{padding:10px 16px;background:#1c2833;color:#fdfefe}
header h1{font-size:17px;margin:0 0 4px}
header .meta{font-size:12.5px;color:#d5dbdb}
.legend{margin-top:6px;font-size:12px}
.legend span{display:inline-block;padding:1px 6px;margin:2px 4px 0 0;border-radius:3px}
.layout{display:flex;gap:12px;padding:12px;align-items:flex-start}
.grid-pane{flex:0 1 auto;max-width:48%;max-height:calc(100vh - 110px);overflow:auto;background:#fff;
  border:1px solid #d5d8dc;border-radius:4px}
table.grid{border-collapse:collapse;font-size:12.5px}
.grid th,.grid td{border-bottom:1px solid #eaeded;padding:3px 6px;text-align:left;white-space:nowrap}
.grid thead th{position:sticky;top:0;background:#fbfcfc;z-index:1}
.grid .pname{color:#707b7c;font-weight:normal;font-size:11.5px;display:block;max-width:220px;
  overflow:hidden;text-overflow:ellipsis}
button.cell{font:inherit;font-size:11.5px;min-width:54px;padding:3px 4px;border:2px solid transparent;
  border-radius:3px;cursor:pointer;color:#fff}
button.cell.light{color:#1c2833}
button.cell.pending{border:1px dashed #909497}
button.cell.sel{border-color:#1c2833;box-shadow:0 0 0 2px #f7dc6f}
.detail-pane{flex:1 1 0;min-width:0;max-height:calc(100vh - 110px);overflow:auto;background:#fff;
  border:1px solid #d5d8dc;border-radius:4px;padding:10px 14px}
.turn h2{font-size:16px;margin:2px 0 6px}
.turn h3{font-size:13.5px;margin:12px 0 4px;color:#34495e}
.badge{display:inline-block;padding:1px 7px;border-radius:3px;color:#fff;font-size:12px;margin-right:6px}
.badge.light{color:#1c2833}
pre{margin:0;padding:8px;background:#f8f9f9;border:1px solid #eaeded;border-radius:3px;overflow:auto;
  max-height:420px;font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre}
pre.wrap{white-space:pre-wrap;word-break:break-word}
.diff .add{background:#e9f7ef;color:#145a32}.diff .del{background:#fdedec;color:#922b21}
.diff .hunk{color:#2471a3}.diff .file{color:#707b7c}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0;font-size:13px}
dl.facts dt{color:#707b7c}dl.facts dd{margin:0}
.muted{color:#707b7c}
details summary{cursor:pointer;color:#2471a3;margin:6px 0}
"""

_JS = """(function(){
var cur=null;
function show(id){
 var s=document.getElementById(id);
 if(!s||!s.classList.contains('turn'))return;
 if(cur){cur.hidden=true;var o=document.querySelector('[data-t="'+cur.id+'"]');if(o)o.classList.remove('sel');}
 s.hidden=false;cur=s;
 var b=document.querySelector('[data-t="'+id+'"]');if(b)b.classList.add('sel');
 var h=document.getElementById('hint');if(h)h.hidden=true;
 try{history.replaceState(null,'','#'+id);}catch(err){}
}
document.addEventListener('click',function(ev){
 var b=ev.target.closest('[data-t]');if(b)show(b.getAttribute('data-t'));
});
if(location.hash)show(decodeURIComponent(location.hash.slice(1)));
})();"""


def _style(status: str | None) -> tuple[str, str, str]:
    """(status key, label, css classes extra) of a turn status."""
    key = status if status in STATUS_STYLE else "pending"
    extra = " light" if key in _LIGHT else ""
    return key, STATUS_STYLE[key][0], extra


def _fmt_speedup(s: float | None) -> str:
    """`1.25x`; two significant digits below 0.01 (`0.00026x`: the Triton interpreter on a CPU)."""
    return "" if s is None else f"{s:.2f}x" if s >= 0.01 else f"{s:.2g}x"


def _cell(t: Mapping[str, Any]) -> str:
    key, label, extra = _style(t["status"])
    speed = t.get("retimed_speedup") or t.get("speedup")
    text = f"{label} {_fmt_speedup(speed)}" if key == "correct" and speed is not None else label
    title = t["summary"]
    if t.get("retimed_speedup") is not None:  # the cell shows it; the summary is the turn's own timing
        title += f"; re-timed in a fresh process: {_fmt_speedup(t['retimed_speedup'])}"
    return (f'<button type="button" class="cell {key}{extra}" data-t="t-{int(t["id"])}" '
            f'style="background:{STATUS_STYLE[key][1]}" title="{e(title)}">{e(text)}</button>')  # fmt: skip


def _pre(text: str | None, wrap: bool = False) -> str:
    if text is None:
        return '<p class="muted">(none)</p>'
    return f"<pre{' class=wrap' if wrap else ''}>{e(text)}</pre>"


def _diff_html(t: Mapping[str, Any]) -> str:
    if t["code"] is None:
        return '<p class="muted">no code in this reply</p>'
    if t["diff_base"] is None:
        return '<p class="muted">the first code of this trajectory (shown whole below)</p>'
    if not t["diff"]:
        return f'<p class="muted">the same code as turn {int(t["diff_base"])}</p>'
    out = []
    for line in t["diff"]:
        cls = ("file" if line.startswith(("---", "+++")) else "hunk" if line.startswith("@@")
               else "add" if line.startswith("+") else "del" if line.startswith("-") else "")  # fmt: skip
        out.append(f'<span class="{cls}">{e(line)}</span>' if cls else e(line))
    return '<pre class="diff">' + "\n".join(out) + "</pre>"


def _facts(pairs: Iterable[tuple[str, Any]]) -> str:
    items = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in pairs if v not in (None, "", []))
    return f'<dl class="facts">{items}</dl>'


def _evaluation_html(t: Mapping[str, Any]) -> str:
    er = t.get("eval_json") or {}
    corr = er.get("correctness") or {}
    timing = er.get("timing") or {}
    failing = [r for r in corr.get("results") or [] if not r.get("passed")]
    pairs: list[tuple[str, Any]] = [
        ("status", t["status"]),
        ("KernelBench's rules", t.get("parity_status") if t.get("parity_status") != t["status"] else None),
        ("message", er.get("message") if er.get("message") != t["status"] else None),
        (
            "trials",
            f"{corr.get('passed', 0)}/{corr['trials']} passed (atol {corr.get('atol')}, rtol "
            f"{corr.get('rtol')})"
            if corr.get("trials")
            else None,
        ),  # fmt: skip
        (
            "first failing trial",
            failing[0].get("diagnosis") or failing[0].get("problem") if failing else None,
        ),
        ("strict checks failed", ", ".join(t["failed_checks"]) if t.get("failed_checks") else None),
        ("speedup", _fmt_speedup(t.get("speedup"))),
        (
            "re-timed",
            f"{_fmt_speedup(t.get('retimed_speedup'))} ({t.get('retimed_status')})"
            if t.get("retimed_status")
            else None,
        ),  # fmt: skip
        (
            "reference / candidate",
            f"{t['ref_runtime_ms']:.4f} ms / {t['runtime_ms']:.4f} ms"
            if t.get("runtime_ms") and t.get("ref_runtime_ms")
            else None,
        ),  # fmt: skip
        ("timing", timing.get("method")),
        ("library share", f"{t['library_share']:.0%}" if t.get("library_share") is not None else None),
        ("stages (s)", ", ".join(f"{k} {v:.2f}" for k, v in (er.get("stages") or {}).items())),
        (
            "reused",
            "the code repeats an earlier turn's, whose result this is; not evaluated again (that evaluation's "
            "stages: "
            + ", ".join(f"{k} {v:.2f}" for k, v in (er["reused"].get("stages") or {}).items())
            + ")"
            if er.get("reused")
            else None,
        ),  # fmt: skip
    ]
    if t.get("rescored"):
        r = t["rescored"]
        pairs.append(("rescored", f"{r['status']} {_fmt_speedup(r.get('speedup'))} under evaluator "
                                  f"{r['evaluator_version']} ({r['rescored_at']})"))  # fmt: skip
    body = _facts(pairs)
    if er:
        body += ("<details><summary>the whole EvalResult (JSON)</summary>"
                 + _pre(json.dumps(er, indent=1)) + "</details>")  # fmt: skip
    return body


def _turn_section(row: Mapping[str, Any], t: Mapping[str, Any]) -> str:
    key, _, extra = _style(t["status"])
    tokens = f"{t['tokens_in'] or 0:,} in + {t['tokens_out'] or 0:,} out tokens"
    cost = f", ${t['cost_usd']:.4f}" if t.get("cost_usd") is not None else ""
    latency = f", {t['latency_s']:.1f} s" if t.get("latency_s") is not None else ""
    head = (f'<h2><span class="badge{extra}" style="background:{STATUS_STYLE[key][1]}">{e(t["status"] or "pending")}'
            f'</span>{e(row["problem"])} sample {int(row["sample"])} turn {int(t["idx"])}</h2>'
            f'<p class="muted">{e(t["summary"])}<br>{e(tokens + cost + latency)}'
            f'{", finish: " + e(t["finish_reason"]) if t.get("finish_reason") else ""}</p>')  # fmt: skip
    diff_title = f"Code: diff against turn {int(t['diff_base'])}" if t.get("diff_base") else "Code"
    parts = [
        head,
        "<h3>Evaluation</h3>", _evaluation_html(t),
        f"<h3>{e(diff_title)}</h3>", _diff_html(t),
        "<details><summary>the whole code</summary>" + _pre(t["code"]) + "</details>" if t["code"] else "",
        "<h3>Feedback (what the model read next)</h3>", _pre(t["feedback"], wrap=True),
        "<h3>Reply</h3>", _pre(t["response"], wrap=True),
    ]  # fmt: skip
    return f'<section class="turn" id="t-{int(t["id"])}" hidden>' + "".join(parts) + "</section>"


def render_html(view: Mapping[str, Any]) -> str:
    """The page for a `build_view` dict: one HTML document, every stored value escaped."""
    run = view["run"]
    k = view["max_turn"]
    statuses: dict[str, int] = defaultdict(int)
    for row in view["rows"]:
        for t in row["turns"].values():
            statuses[t["status"] or "pending"] += 1
    legend = "".join(
        f'<span class="{"light" if s in _LIGHT else ""}" style="background:{c};'
        f'color:{"#1c2833" if s in _LIGHT else "#fff"}">{e(label)} = {e(s)} ({statuses.get(s, 0)})</span>'
        for s, (label, c) in STATUS_STYLE.items()
        if statuses.get(s) or s in ("correct", "incorrect", "compile_error")
    )
    meta = (f"{run['id']} · model {run['model']} · {run['backend']} · {run['precision']} · "
            f"{run['gpu'] or run.get('device') or 'device unknown'} · status {run['status']} · "
            f"{len(view['rows'])} trajectories · {sum(statuses.values())} turns")  # fmt: skip
    head_cells = "".join(f"<th>{i}</th>" for i in range(1, k + 1))
    body_rows, sections = [], []
    for row in view["rows"]:
        best = (f"{_fmt_speedup(row['best_speedup'])} @{int(row['best_turn'])}"
                if row["best_speedup"] is not None and row["best_turn"] is not None else "–")  # fmt: skip
        cells = []
        for i in range(1, k + 1):
            t = row["turns"].get(i)
            cells.append(f"<td>{_cell(t)}</td>" if t else "<td></td>")
            if t:
                sections.append(_turn_section(row, t))
        label = f"{row['problem']}" + (f" #{int(row['sample'])}" if row["sample"] else "")
        name = "" if str(row["problem"]).endswith(f"/{row['name']}") else row["name"]
        body_rows.append(f'<tr><th>{e(label)}<span class="pname">{e(name)}</span></th>'
                         f"<td>{e(best)}</td>{''.join(cells)}</tr>")  # fmt: skip
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src '{script_hash()}'; img-src data:"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{e(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(run["name"])} · kb-agent</title>
<style>{_CSS}</style></head>
<body>
<header><h1>{e(run["name"])}</h1><div class="meta">{e(meta)}</div><div class="legend">{legend}</div></header>
<div class="layout">
<div class="grid-pane"><table class="grid"><thead><tr><th>problem</th><th>best</th>{head_cells}</tr></thead>
<tbody>{"".join(body_rows)}</tbody></table></div>
<div class="detail-pane"><p id="hint" class="muted">Click a cell to see the turn: its evaluation, the diff
of its code against the previous turn, the feedback and the model's reply.</p>{"".join(sections)}</div>
</div>
<script>{_JS}</script>
</body></html>
"""


def script_hash() -> str:
    """The page script's CSP source, `'sha256-…'` without the quotes."""
    return "sha256-" + base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()


def write_view(store: Store, run_ref: str, output: str | Path | None = None) -> Path:
    """Write the page for run `run_ref` to `output` (default `<run name>.html` beside the store) and
    return its path.

    Raises:
        StoreError: an unknown run. UsageError: `output` is a folder.
    """
    if output is not None and Path(output).is_dir():
        raise UsageError(f"--output {str(output)!r} is a folder; give a file name such as run.html")
    view = build_view(store, run_ref)
    if output is None:
        output = store.path.parent / (file_stem(view["run"]["name"]) + ".html")
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(view), encoding="utf-8")
    return path


__all__ = ["STATUS_STYLE", "build_view", "code_diff", "e", "render_html", "script_hash", "write_view"]
