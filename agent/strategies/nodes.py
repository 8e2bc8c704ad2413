"""`Tree`: one trajectory's stored tree of turns, and the one way strategies grow it.

`Tree.grow(parents)` makes one child per entry of `parents` (a node index, or 0 for a root asked from
the task prompt alone): the new nodes take the next indices, their model calls run at once (one thread
each), then their candidates are evaluated at once through the evaluation pool (`EvalPool.submit`; an
evaluator without `submit` is called from threads), and each node is stored with its parent, its
evaluation and its feedback. A node already stored whole is returned as stored (no call, no
evaluation); one whose reply is stored but not evaluated is evaluated without asking again; so a
strategy that decides only from what `grow` returned replays the same tree on resume.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kb_agent.agent import loop
from kb_agent.agent.extract import extract_code
from kb_agent.agent.feedback import feedback_for, initial_messages
from kb_agent.agent.llm import LLMError
from kb_agent.agent.metrics import counted_speedup
from kb_agent.agent.store import StoreError
from kb_agent.evaluator.result import EvalResult
from kb_agent.problems import Problem

log = logging.getLogger(__name__)
T, R = TypeVar("T"), TypeVar("R")

# how informative a failure is to the next turn: it ran and was wrong > it crashed > it did not build
FAILURE_RANK = {"incorrect": 5, "runtime_error": 4, "timeout": 3, "rejected": 2, "compile_error": 1}


def parallel(fn: Callable[[T], R], items: list[T]) -> list[R]:
    """`fn` over `items`, one daemon thread each (a thread stuck in a model call never holds up the
    exit after Ctrl-C, which is raised here at once); results in order, the first exception re-raised."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    out: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            out[i] = fn(items[i])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.05)
    if errors:
        raise errors[0]
    return out


@dataclass
class Node:
    """One finished node: turn `idx` of the trajectory, child of turn `parent` (0: a root)."""

    idx: int
    parent: int
    depth: int
    status: str  # an evaluator status, or "no_code"
    speedup: float | None  # reference ms / candidate ms when correct and timed (strict), else None
    reply: str
    feedback: str


def rank_key(node: Node) -> tuple:
    """Sort key, best first: correct nodes by speedup (the faster first), then failures by how much
    they tell the next turn (`FAILURE_RANK`; no code last), then the earlier node."""
    if node.status == "correct":
        return (0, -(node.speedup or 0.0), node.idx)
    return (1, -FAILURE_RANK.get(node.status, 0), node.idx)


class Tree:
    """The stored tree of trajectory `traj_id` (a strategy's working state), grown with `grow`."""

    def __init__(self, ctx: Any, traj_id: int, problem: Problem, sample: int):
        self.ctx, self.traj_id, self.problem, self.sample = ctx, traj_id, problem, sample
        cfg = ctx.config
        self.rows = {t["idx"]: t for t in ctx.store.turns(traj_id)}
        first = self.rows.get(1)
        self.task = [dict(m) for m in first["messages"][:2]] if first else initial_messages(
            problem, cfg.backend, cfg.gpu_name or "an NVIDIA GPU", cfg.arch or "unknown", cfg.precision
        )  # fmt: skip
        self.nodes: dict[int, Node] = {}
        self.next_idx = 1

    def conversation(self, parent: int) -> list[dict[str, str]]:
        """The task prompt, then each ancestor's reply and feedback down to `parent` (0: the task alone)."""
        chain = []
        while parent:
            node = self.nodes[parent]
            chain.append(node)
            parent = node.parent
        history = [dict(m) for m in self.task]
        for node in reversed(chain):
            history += [
                {"role": "assistant", "content": node.reply},
                {"role": "user", "content": node.feedback},
            ]
        return history

    def tokens(self) -> int:
        return sum((t["tokens_in"] or 0) + (t["tokens_out"] or 0) for t in self.rows.values())

    def grow(self, parents: list[int]) -> list[Node] | str:
        """One child of each of `parents`; return the new nodes in order, or the trajectory's outcome
        when it must end here (`token_budget`, `cost_budget`, `model_error`, `model_unavailable`).

        Raises:
            StoreError: a stored node has another parent than asked (the run's settings changed).
            loop.ModelUnavailable: the model failed before the run had one reply.
        """
        ctx, cfg = self.ctx, self.ctx.config
        plan = list(enumerate(parents, start=self.next_idx))
        self.next_idx += len(parents)
        todo = []
        for idx, parent in plan:
            row = self.rows.get(idx)
            if row is not None and self._parent_of(row) != parent:
                raise StoreError(f"turn {idx} of trajectory {self.traj_id} has another parent than the strategy "
                                 f"asks for now; was the run's strategy changed?")  # fmt: skip
            if row is None or row["response"] is None:
                todo.append((idx, parent))
        if todo:  # some node needs the model: the budgets are checked before asking
            if ctx.stop.is_set():
                raise loop._Stopped()
            if cfg.token_budget is not None and self.tokens() >= cfg.token_budget:
                return "token_budget"
            if cfg.cost_budget_usd is not None and ctx.cost_usd >= cfg.cost_budget_usd:
                return "cost_budget"
        outcomes = self._ask(todo)
        if outcomes:
            return outcomes[0]
        self._evaluate(
            [(idx, parent) for idx, parent in plan if self.rows[idx]["status"] in (None, "model_error")]
        )
        return [self.nodes[idx] for idx, _ in plan]

    # -- the two phases
    def _ask(self, todo: list[tuple[int, int]]) -> list[str]:
        """The model calls of `todo`, one thread each; store each reply the moment it arrives. Return the
        outcomes of failed calls (empty when all answered)."""
        ctx = self.ctx
        sent = {idx: loop._context(self.conversation(parent), ctx.config.context) for idx, parent in todo}
        ids = {
            idx: ctx.store.start_turn(self.traj_id, idx, sent[idx], parent_idx=parent) for idx, parent in todo
        }

        def call(idx: int) -> str | None:  # the reply is stored the moment it arrives
            try:
                reply = ctx.model.complete(sent[idx])
            except LLMError as e:
                outcome = "model_unavailable" if getattr(e, "transient", False) else "model_error"
                log.warning("%s sample %d turn %d: %s: %s", self.problem.key, self.sample, idx, outcome, e)
                ctx.store.record_evaluation(
                    ids[idx], code=None, status="model_error", eval_result=None, feedback=None
                )
                return outcome
            with ctx.lock:
                ctx.replies += 1
                ctx.cost_usd += reply.cost_usd or 0.0
            ctx.store.record_response(ids[idx], reply.text, tokens_in=reply.tokens_in, tokens_out=reply.tokens_out,
                                      cost_usd=reply.cost_usd, latency_s=reply.latency_s, model_answered=reply.model,
                                      finish_reason=reply.finish_reason, extra=reply.extra)  # fmt: skip
            return None

        failed = [outcome for outcome in parallel(call, list(ids)) if outcome is not None]
        for idx, _ in todo:
            self.rows[idx] = ctx.store.turn(self.traj_id, idx)
        if failed and ctx.replies == 0:
            raise loop.ModelUnavailable("no reply from the model, so the run stops", outcome=failed[0])
        return failed

    def _evaluate(self, todo: list[tuple[int, int]]) -> None:
        """Evaluate the stored replies of `todo` at once, store each result and its feedback; then every
        planned node (stored before or not) is in `self.nodes`."""
        ctx, cfg = self.ctx, self.ctx.config
        codes = {idx: extract_code(self.rows[idx]["response"]) for idx, _ in todo}
        results = self._results({i: c for i, c in codes.items() if c is not None})
        for idx, parent in todo:
            row, result = self.rows[idx], results.get(idx)
            repeated = loop.sent_before(result, codes[idx], self.conversation(parent))
            feedback = feedback_for(result, no_code=result is None, truncated=row["finish_reason"] == "length",
                                    recipe=cfg.feedback, repeated=repeated)  # fmt: skip
            status = str(result.status) if result is not None else "no_code"
            ctx.store.record_evaluation(row["id"], code=codes[idx], status=status,
                                        eval_result=result.to_dict() if result is not None else None,
                                        feedback=feedback)  # fmt: skip
            loop._record_hardware(ctx, result)
            self.rows[idx] = row = ctx.store.turn(self.traj_id, idx)
            self._event(row, result)
        for idx in sorted(self.rows):
            row = self.rows[idx]
            if idx not in self.nodes and row["status"] not in (None, "model_error") and idx < self.next_idx:
                self.nodes[idx] = Node(idx, self._parent_of(row), row["depth"] or idx, row["status"], counted_speedup(row),
                                       row["response"], row["feedback"] or "")  # fmt: skip

    def _parent_of(self, row: dict[str, Any]) -> int:
        return next((i for i, r in self.rows.items() if r["id"] == row["parent_id"]), 0)

    def _results(self, codes: dict[int, str]) -> dict[int, EvalResult]:
        ev = self.ctx.evaluator
        with loop._evaluating(self.ctx):
            if hasattr(ev, "submit") and hasattr(ev, "settings"):
                from kb_agent.evaluator.pool import EvalJob

                futures = {i: ev.submit(EvalJob(self.problem, c, ev.settings)) for i, c in codes.items()}
                return {i: f.result() for i, f in futures.items()}
            got = parallel(lambda c: ev.evaluate(self.problem, c), list(codes.values()))
            return dict(zip(codes, got, strict=True))

    def _event(self, row: dict[str, Any], result: EvalResult | None) -> None:
        ctx = self.ctx
        if ctx.on_turn is None:
            return
        speedup = result.speedup if result is not None and result.correct else None
        event = loop.TurnEvent(run_id=ctx.run_id, trajectory_id=self.traj_id, problem=self.problem.key,
                               sample=self.sample, idx=row["idx"], status=row["status"], speedup=speedup,
                               tokens_in=row["tokens_in"], tokens_out=row["tokens_out"], cost_usd=row["cost_usd"],
                               result=result)  # fmt: skip
        with ctx.lock:
            ctx.on_turn(event)


__all__ = ["FAILURE_RANK", "Node", "Tree", "parallel", "rank_key"]
