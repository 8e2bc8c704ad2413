"""Search strategies (issue 16) through litellm and the fake model server, with an evaluator keyed on
the candidate's code (replies arrive in any order when they are asked at once): each strategy's model
calls and evaluations, the tree it leaves in the store, and a best-of-n run killed with SIGKILL and
resumed without asking again for a reply it has."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest
from kb_agent.agent import job
from kb_agent.agent.fakeserver import slow
from kb_agent.agent.llm import LLMConfig
from kb_agent.agent.loop import SolveConfig
from kb_agent.agent.store import Store
from kb_agent.agent.strategies.nodes import Node
from kb_agent.agent.strategies.tree import draw
from kb_agent.evaluator.fake import canned
from kb_agent.problems import resolve

RELU = resolve("toy/relu")


def kernel(tag: str) -> str:
    """A reply whose candidate the KeyedEvaluator judges by `tag`: `1.5` (correct, 1.5x) or a status."""
    return f"Try this.\n```python\nclass ModelNew:  # result={tag}\n    pass\n```"


class KeyedEvaluator:
    """Judges a candidate by the `# result=` tag in its code; thread-safe; `calls` counts evaluations."""

    def __init__(self):
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def evaluate(self, problem, source):
        tag = re.search(r"# result=(\S+)", source).group(1)
        with self.lock:
            self.calls.append(tag)
        return canned("correct", float(tag)) if tag[0].isdigit() else canned(tag)


def cfg(**kw) -> SolveConfig:
    return SolveConfig(**{"backend": "triton", "device": "cpu", "gpu_name": "x", "arch": "9.0",
                          "retime_best": False, **kw})  # fmt: skip


def llm(base: str) -> LLMConfig:
    return LLMConfig(model="openai/scripted", api_base=base, max_attempts=2, backoff_initial_s=0.01)


def tree_of(db, run_id):
    """(idx, parent_idx, depth, status, speedup) of the run's one trajectory, and its tag per idx."""
    with Store(db) as s:
        (traj,) = s.trajectories(run_id)
        rows = s.turn_summaries(run_id)
        tags = {t["idx"]: re.search(r"result=(\S+)", t["response"]).group(1) for t in s.turns(traj["id"])
                if t["response"] and "result=" in t["response"]}  # fmt: skip
    return [(t["idx"], t["parent_idx"], t["depth"], t["status"], t["speedup"]) for t in rows], tags


def test_best_of_n_asks_n_per_turn_and_the_fastest_correct_carries_on(fake_llm, tmp_path):
    fake_llm.add(kernel("1.2"), kernel("2.0"), kernel("incorrect"), kernel("3.0"), kernel("0.5"), "no code")
    ev, db = KeyedEvaluator(), tmp_path / "kb.sqlite"
    run_id = job.start(RELU, cfg(turns=2, strategy="best-of-n", n=3), llm(fake_llm.openai_base), store=db,
                       evaluator=ev, jobs=1)  # fmt: skip
    nodes, tags = tree_of(db, run_id)
    assert len(fake_llm.requests) == 6 and len(ev.calls) == 5  # the reply without code is not evaluated
    best = next(i for i, tag in tags.items() if tag == "2.0")
    assert [(i, p, d) for i, p, d, *_ in nodes] == [(1, None, 1), (2, None, 1), (3, None, 1),
                                                    (4, best, 2), (5, best, 2), (6, best, 2)]  # fmt: skip
    # round 2 continued the 2.0x conversation: its reply and feedback end every second-round prompt
    second = [r.body["messages"] for r in fake_llm.requests[3:]]
    assert all("result=2.0" in m[-2]["content"] for m in second)
    with Store(db) as s:
        assert s.trajectories(run_id)[0]["best_speedup"] == 3.0


def test_best_of_n_without_a_correct_one_carries_the_most_informative_failure(fake_llm, tmp_path):
    fake_llm.add(kernel("compile_error"), "no code", kernel("incorrect"), kernel("1.1"))
    ev, db = KeyedEvaluator(), tmp_path / "kb.sqlite"
    run_id = job.start(RELU, cfg(turns=2, strategy="best-of-n", n=3), llm(fake_llm.openai_base), store=db,
                       evaluator=ev, jobs=1)  # fmt: skip
    nodes, tags = tree_of(db, run_id)
    wrong = next(i for i, tag in tags.items() if tag == "incorrect")
    assert {p for i, p, *_ in nodes if i > 3} == {wrong}


def test_beam_keeps_the_width_best_and_branches_each(fake_llm, tmp_path):
    fake_llm.add(kernel("1.5"), kernel("0.9"), kernel("runtime_error"), kernel("2.5"), *[kernel("1.0")] * 4)
    ev, db = KeyedEvaluator(), tmp_path / "kb.sqlite"
    run_id = job.start(RELU, cfg(turns=2, strategy="beam", width=2, branch=2), llm(fake_llm.openai_base),
                       store=db, evaluator=ev, jobs=1)  # fmt: skip
    nodes, tags = tree_of(db, run_id)
    assert len(fake_llm.requests) == 8 and len(ev.calls) == 8  # 2 rounds of width x branch
    kept = {i for i, tag in tags.items() if tag in ("2.5", "1.5")}
    assert Counter(p for i, p, *_ in nodes if i > 4) == {k: 2 for k in kept}
    assert [d for *_, d, _s, _v in nodes] == [1, 1, 1, 1, 2, 2, 2, 2]


def test_tree_draws_earlier_kernels_seeded_and_the_same_seed_gives_the_same_tree(fake_llm, tmp_path):
    script = [kernel("1.0"), kernel("3.0"), kernel("incorrect"), kernel("2.0"), kernel("1.5"), kernel("0.8")]
    shapes = []
    for name in ("a", "b"):
        fake_llm.add(*script)
        db = tmp_path / f"{name}.sqlite"
        run_id = job.start(RELU, cfg(turns=6, strategy="tree", seed=7), llm(fake_llm.openai_base), store=db,
                           evaluator=KeyedEvaluator(), jobs=1)  # fmt: skip
        nodes, _ = tree_of(db, run_id)
        assert all(p is None or p < i for i, p, *_ in nodes) and nodes[0][1] is None
        shapes.append([(i, p) for i, p, *_ in nodes])
    assert len(fake_llm.requests) == 12 and shapes[0] == shapes[1]


def test_the_tree_draw_rises_with_the_speedup():
    import random

    rng = random.Random(0)
    nodes = [Node(1, 0, 1, "correct", 3.0, "", ""), Node(2, 0, 1, "correct", 0.5, "", ""),
             Node(3, 0, 1, "incorrect", None, "", "")]  # fmt: skip
    drawn = Counter(draw(rng, nodes) for _ in range(4000))
    assert drawn[1] > drawn[0] > drawn[2] > drawn[3] > 0  # 3x > the task (1) > 0.5x > a failure (0.1)


def test_bad_strategy_settings_are_refused():
    with pytest.raises(ValueError, match="unknown strategy 'greedy'; choose one of linear, best-of-n"):
        SolveConfig(strategy="greedy")
    with pytest.raises(ValueError, match="width must be 1 or more"):
        SolveConfig(strategy="beam", width=0)
    assert SolveConfig(strategy="beam", turns=3, width=2, branch=3).model_calls() == 18


KILLED = textwrap.dedent("""
    import sys
    from kb_agent.agent import job
    from kb_agent.agent.loop import SolveConfig
    from kb_agent.agent.llm import LLMConfig
    from kb_agent.problems import resolve
    sys.path.insert(0, sys.argv[3])
    from test_strategies import KeyedEvaluator, cfg
    job.start(resolve("toy/relu"), cfg(turns=2, strategy="best-of-n", n=3, run_name="killed"),
              LLMConfig(model="openai/scripted", api_base=sys.argv[1], max_attempts=1), store=sys.argv[2],
              evaluator=KeyedEvaluator(), jobs=1)
""")


@pytest.mark.slow  # a CLI process killed mid-run and a second one resuming, about 6 s on 2 cores
def test_a_killed_best_of_n_run_resumes_without_asking_again_for_a_stored_reply(fake_llm, tmp_path):
    fake_llm.add(
        kernel("1.0"), kernel("2.0"), kernel("0.5"), kernel("1.1"), kernel("1.2"), slow(kernel("9.0"), 60)
    )
    db = tmp_path / "kb.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, fake_llm.openai_base, str(db), os.path.dirname(__file__)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    deadline, answered = time.time() + 60, 0
    while time.time() < deadline and answered < 5:  # round 1 and two of round 2's replies stored
        time.sleep(0.1)
        if db.exists():
            with Store(db) as s:
                answered = s.db.execute("SELECT count(*) FROM turns WHERE response IS NOT NULL").fetchone()[0]
    assert answered == 5, proc.stderr.read().decode() if proc.poll() is not None else "timed out"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert len(fake_llm.requests) == 6
    fake_llm.add(kernel("1.3"))
    ev = KeyedEvaluator()
    job.resume_run("killed", store=db, evaluator=ev, jobs=1)
    assert len(fake_llm.requests) == 7  # only the reply that never came was asked again
    nodes, _ = tree_of(db, job_run_id(db))
    assert [s for *_, s, _v in nodes] == ["correct"] * 6 and len(nodes) == 6
    assert len(ev.calls) >= 1 and "9.0" not in ev.calls


def job_run_id(db):
    with Store(db) as s:
        return s.get_run("killed")["id"]


def test_best_of_n_evaluates_a_round_at_once_through_the_pool(fake_llm, tmp_path):
    """Through `EvalPool.submit` with a fake executor: the 3 candidates of a round overlap in time."""
    from kb_agent.evaluator.pool import EvalPool
    from kb_agent.evaluator.settings import EvalSettings

    keyed, running, peak, lock = KeyedEvaluator(), [0], [0], threading.Lock()

    def run_job(job):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return keyed.evaluate(job.problem, job.source)

    pool = EvalPool(EvalSettings(device="cpu"), cpu_slots=3, run_job=run_job)
    fake_llm.add(kernel("1.0"), kernel("2.0"), kernel("0.5"))
    run_id = job.start(RELU, cfg(turns=1, strategy="best-of-n", n=3), llm(fake_llm.openai_base),
                       store=tmp_path / "kb.sqlite", evaluator=pool, jobs=1)  # fmt: skip
    assert sorted(keyed.calls) == ["0.5", "1.0", "2.0"] and peak[0] == 3
    with Store(tmp_path / "kb.sqlite") as s:
        assert s.trajectories(run_id)[0]["best_speedup"] == 2.0


def test_the_token_budget_counts_over_the_tree(fake_llm, tmp_path):
    fake_llm.add(*[kernel("1.0")] * 6)
    db = tmp_path / "kb.sqlite"
    run_id = job.start(RELU, cfg(turns=3, strategy="beam", width=1, branch=2, token_budget=10),
                       llm(fake_llm.openai_base), store=db, evaluator=KeyedEvaluator(), jobs=1)  # fmt: skip
    with Store(db) as s:
        (traj,) = s.trajectories(run_id)
        assert traj["outcome"] == "token_budget" and len(s.turns(traj["id"])) == 2  # one round, then over
    assert len(fake_llm.requests) == 2


def test_runs_show_names_each_node_s_parent_for_a_tree_only(fake_llm, tmp_path):
    from kb_agent.agent.report import render_show_text, show_run

    fake_llm.add(kernel("1.0"), kernel("2.0"), kernel("1.5"), kernel("1.1"))
    db = tmp_path / "kb.sqlite"
    job.start(RELU, cfg(turns=2, strategy="best-of-n", n=2, run_name="bon"), llm(fake_llm.openai_base),
              store=db, evaluator=KeyedEvaluator(), jobs=1)  # fmt: skip
    fake_llm.add(kernel("1.0"))
    job.start(RELU, cfg(turns=1, run_name="lin"), llm(fake_llm.openai_base), store=db, evaluator=KeyedEvaluator(),
              jobs=1)  # fmt: skip
    with Store(db) as s:
        tree_text, chain_text = render_show_text(show_run(s, "bon")), render_show_text(show_run(s, "lin"))
    header = next(line for line in tree_text.splitlines() if line.startswith("turn"))
    assert header.split()[:2] == ["turn", "parent"] and "task" in tree_text
    assert "parent" not in chain_text
