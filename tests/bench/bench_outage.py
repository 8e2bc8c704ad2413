"""How long does a sweep take to notice that its model server died? (issue 14, flaky providers)

    python tests/bench/bench_outage.py [--jobs 4] [--samples 2] [--turns 3] [--latency-s 0.5]
        [--outage 503|stop] [--after 4]

Runs the main job (`agent.job.start`, as `kb-agent solve` runs it) on the five toy problems x `--samples`
against the bundled fake model server (`kb_agent.agent.fakeserver`, each answer after `--latency-s`
seconds), `--jobs` trajectories in flight, with the client's default retries (`LLMConfig`: 6 attempts,
backoff from 1 s). Evaluations are canned (0.3 s each, `ScriptedEvaluator`), so the model is all there is
to wait for. After `--after` replies the server goes down: it answers every request with HTTP 503
(`--outage 503`), or stops listening (`--outage stop`: connection refused).

Prints one JSON line: {"jobs", "trajectories", "outage", "outage_to_end_s" (seconds from the outage to
the end of the run), "requests_after_outage" (chat requests the dead server received), "status" (the
run's), "outcomes" (trajectory outcomes counted; None: never started, resumable)}. After `--outage stop`
the server records nothing (requests_after_outage 0).

Measured on the 2-core CPU machine (defaults: 10 trajectories, 4 in flight, outage after 4 replies):
before the client's circuit breaker, every trajectory spent its own ~33 s of retries, 4 at a time:
503 110.9 s (60 requests to the dead server), stop 101.3 s, all 10 trajectories `model_unavailable`;
with it, 503 37.2 s (24 requests: the 4 calls in flight), stop 34.4 s, 4 `model_unavailable` and 6 never
started; the run `incomplete` each time.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from kb_agent.agent import job
from kb_agent.agent.fakeserver import FakeLLMServer
from kb_agent.agent.llm import LLMConfig
from kb_agent.agent.loop import SolveConfig
from kb_agent.agent.store import Store
from kb_agent.evaluator.fake import ScriptedEvaluator, canned
from kb_agent.problems import resolve

CODE = "```python\nclass ModelNew:\n    pass\n```"


class SlowEvaluator(ScriptedEvaluator):
    def evaluate(self, problem, candidate_source):
        time.sleep(0.3)
        return super().evaluate(problem, candidate_source)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--latency-s", type=float, default=0.5)
    ap.add_argument("--outage", choices=("503", "stop"), default="503")
    ap.add_argument("--after", type=int, default=4, help="replies served before the outage")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)

    srv = FakeLLMServer([CODE] * args.turns, by_turn=True, latency_s=args.latency_s).start()
    down_at: list[float] = []
    served, n_before = [0], [0]
    lock = threading.Lock()

    def on_turn(_event) -> None:
        with lock:
            served[0] += 1
            if served[0] == args.after and not down_at:
                down_at.append(time.monotonic())
                n_before[0] = len(srv.requests)
                if args.outage == "503":
                    srv.failing(503)
                else:
                    srv.stop()

    config = SolveConfig(turns=args.turns, samples=args.samples, backend="triton", device="cpu",
                         gpu_name="x", arch="9.0", run_name="outage", retime_best=False)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "kb.sqlite"
        try:
            run_id = job.start(resolve("toy"), config, LLMConfig(model="openai/scripted", api_base=srv.openai_base),
                               store=db, evaluator=SlowEvaluator([canned("correct", 1.5)]), jobs=args.jobs,
                               on_turn=on_turn)  # fmt: skip
        except Exception as e:  # the run stopped with an error (printed with its status)
            run_id, error = "outage", f"{type(e).__name__}: {e}"
        else:
            error = None
        end = time.monotonic()
        with Store(db) as store:
            run = store.get_run(run_id)
            outcomes = Counter(str(t["outcome"]) for t in store.trajectories(run["id"]))
    srv.stop()
    print(json.dumps({"jobs": args.jobs, "trajectories": 5 * args.samples, "outage": args.outage,
                      "outage_to_end_s": round(end - down_at[0], 1) if down_at else None,
                      "requests_after_outage": len(srv.requests) - n_before[0], "status": run["status"],
                      "outcomes": dict(outcomes), "error": error}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
