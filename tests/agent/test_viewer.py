"""The viewer: one self-contained HTML page per run, every stored text escaped; checked in a real
headless browser where one is installed (Debian's `chromium`), else those tests skip."""

import base64
import hashlib
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from kb_agent.agent.cli import app
from kb_agent.agent.store import Store
from kb_agent.agent.viewer import _JS, build_view, code_diff, render_html, script_hash, write_view
from kb_agent.problems import Problem
from kb_agent.problems.errors import UsageError
from typer.testing import CliRunner

# what a hostile model might reply with: closing our script, a handler, a tag inside an attribute
PAYLOAD = (
    "</script><script>alert(1)</script>"
    "<script>document.documentElement.setAttribute('data-pwned','script')</script>"
    "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">"
    '" onmouseover="alert(2)" \' <!-- &amp; </pre></section>'
)


def add_run(store, name="view"):
    rid = store.create_run(name, {"turns": 3, "device": "cpu"}, "openai/gpt-4o", "triton", "fp32")
    tid = store.create_trajectory(rid, Problem(0, 1, "1_relu" + PAYLOAD, "import torch\n", "test"), 0)
    plan = [
        ("compile_error", "x = 1\n", {"status": "compile_error", "message": "SyntaxError " + PAYLOAD}),
        ("no_code", None, None),
        ("correct", "x = 2\ny = 3\n", {"status": "correct", "speedup": 1.25, "runtime_ms": 1.0, "ref_runtime_ms": 1.25}),
    ]  # fmt: skip
    ids = []
    for i, (status, code, er) in enumerate(plan, start=1):
        u = store.start_turn(tid, i, [{"role": "user", "content": "go"}])
        store.record_response(u, f"reply {i}\n" + PAYLOAD, tokens_in=10, tokens_out=5)
        store.record_evaluation(u, code=code and code + "# " + PAYLOAD + "\n", status=status, eval_result=er,
                                feedback="feedback " + PAYLOAD)  # fmt: skip
        ids.append(u)
    store.finish_trajectory(tid, "turn_budget")
    t2 = store.create_trajectory(rid, Problem(0, 2, "2_add", "import torch\n", "test"), 0)
    store.start_turn(t2, 1, [{"role": "user", "content": "go"}])  # asked, never answered: pending
    return rid, ids


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside <script> elements."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._in_script = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "kb.sqlite") as s:
        yield s


def test_grid_and_diff_against_the_latest_earlier_code(store):
    add_run(store)
    view = build_view(store, "view")
    assert view["max_turn"] == 3 and [r["problem"] for r in view["rows"]] == [
        "toy/1_relu" + PAYLOAD,
        "toy/2_add",
    ]
    turns = view["rows"][0]["turns"]
    assert turns[1]["diff"] == [] and turns[1]["diff_base"] is None  # the first code
    assert turns[2]["code"] is None and turns[2]["diff_base"] == 1
    assert turns[3]["diff_base"] == 1  # the no-code turn 2 is skipped
    assert "-x = 1" in turns[3]["diff"] and "+x = 2" in turns[3]["diff"] and "+y = 3" in turns[3]["diff"]
    assert turns[3]["diff"][:2] == ["--- turn 1", "+++ turn 3"]
    assert view["rows"][1]["turns"][1]["status"] is None  # pending
    assert code_diff("a\n", "a\n", "1", "2") == [] and code_diff(None, "a", "1", "2") == []


def test_every_stored_text_is_escaped_and_the_page_has_one_script_and_no_fetch(store):
    add_run(store)
    page = render_html(build_view(store, "view"))
    p = Tags()
    p.feed(page)
    assert p.scripts == [_JS]  # the payload's scripts never became elements
    assert [t for t, _ in p.tags].count("img") == 0
    assert not any(k.startswith("on") for _, attrs in p.tags for k in attrs)  # no handler attributes
    assert not any(k in ("src", "href") for _, attrs in p.tags for k in attrs)  # nothing to fetch
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "</script><script>alert(1)" not in page
    (csp,) = [a["content"] for t, a in p.tags if a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in csp and f"script-src '{script_hash()}'" in csp
    assert script_hash() == "sha256-" + base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()
    # a section per turn, a cell per turn, coloured by status
    sections = [a["id"] for t, a in p.tags if t == "section"]
    cells = [a for t, a in p.tags if t == "button"]
    assert len(sections) == len(cells) == 4 and [c["data-t"] for c in cells] == sections
    assert [c["class"].split()[1] for c in cells] == ["compile_error", "no_code", "correct", "pending"]
    assert "ok 1.25x" in page


def test_cli_writes_the_page_beside_the_store_and_refuses_a_folder(store, tmp_path):
    add_run(store)
    r = CliRunner().invoke(app, ["view", "view", "--db", str(store.path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "view.html").read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(UsageError, match="is a folder"):
        write_view(store, "view", tmp_path)


def _browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def _chromium(tmp_path, *args, timeout=60):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser here (apt-get install chromium)")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
           "--virtual-time-budget=3000", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_in_a_headless_browser_a_cell_opens_its_turn_and_no_payload_runs(store, tmp_path):
    _, ids = add_run(store)
    page = write_view(store, "view", tmp_path / "page.html")
    r = _chromium(tmp_path, "--dump-dom", f"{page.as_uri()}#t-{ids[2]}")
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "data-pwned" not in dom.split("<body")[0] and 'data-pwned="' not in dom  # no payload ran
    p = Tags()
    p.feed(dom)
    opened = [a for t, a in p.tags if t == "section" and "hidden" not in a]
    assert [a["id"] for a in opened] == [f"t-{ids[2]}"]  # the page's own script ran, under its CSP
    (selected,) = [a for t, a in p.tags if t == "button" and "sel" in a["class"].split()]
    assert selected["data-t"] == f"t-{ids[2]}"
    assert "alert(1)" in dom  # shown as text
    shot = tmp_path / "shot.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,900", f"{page.as_uri()}#t-{ids[2]}")
    assert r.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_turn_that_reused_an_earlier_result_says_so_and_shows_that_evaluations_stages(tmp_path):
    # its own `stages` are empty (nothing ran): the page showed no stage times and nothing saying why
    from kb_agent.agent.viewer import _evaluation_html

    er = {"status": "correct", "stages": {}, "reused": {"stages": {"timing": 2.5}, "child_start": {}}}
    html = _evaluation_html({"status": "correct", "eval_json": er})
    assert "<dt>reused</dt>" in html and "not evaluated again" in html and "timing 2.50" in html
