"""`problems check` as a library call: check many references for degeneracy, several at once.

`check_problems(problems, settings, jobs=4, store=store)` runs `evaluator.runner.check_problem` (one
isolated child per problem) `jobs` at once through the evaluation pool (`evaluator.pool.EvalPool`: CPU
slots, or the visible GPUs, each check on one of them; checks time nothing, so `jobs` above the number of
GPUs share them), checks again alone, after the rest, each problem that ran out of memory beside the
others, stores the findings and returns one result dict per problem. An
interrupt (Ctrl-C, or SIGTERM turned into one) starts no queued check and kills the children of the
running ones before it propagates. `run_pooled` is that engine alone (any function of a problem that
times nothing), for `kb-agent baseline --jobs`'s warm-up compilations too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kb_agent.evaluator.pool import EvalJob, EvalPool, visible_gpus
from kb_agent.evaluator.settings import EvalSettings
from kb_agent.problems import Problem

log = logging.getLogger(__name__)

CheckFn = Callable[[Problem, EvalSettings], dict[str, Any]]
OnResult = Callable[[Problem, dict[str, Any]], None]

# statuses of a check that ran to its end; an "error" or "timeout" must not replace a stored finding.
# "unchecked": the problem cannot be checked here (a package, downloads, memory); stored with the reason,
# never over a finding of the same source (`Store.record_problem_check`)
FINDING_STATUSES = ("ok", "flagged", "unchecked")


def ran_out_of_memory(result: dict[str, Any]) -> bool:
    """Whether a check failed for want of (GPU or host) memory, so that alone it may pass."""
    return result.get("status") == "error" and str(result.get("message", "")).startswith("out of memory")


def check_problems(
    problems: Sequence[Problem],
    settings: EvalSettings,
    *,
    jobs: int = 1,
    store: Any | None = None,
    on_result: OnResult | None = None,
    check: CheckFn | None = None,
) -> list[dict[str, Any]]:
    """Check each of `problems` and return their results, in the order of `problems`.

    Args:
        settings: device, precision and stage limits of every check.
        jobs: checks at once (threads, each waiting on its own child process, through `check_pool`); 1
            or more.
        store: a `Store`; results with a status in `FINDING_STATUSES` are recorded there
            (`record_problem_check`) as they arrive. A check that ran out of memory with no other
            beside it (alone at the end, or with `jobs` 1) comes back "unchecked", reason "memory".
        on_result: called with (problem, result) as each result is final (a problem checked again
            alone reports only its second result).
        check: the function checking one problem; default `evaluator.runner.check_problem`, whose
            result dict (status "ok", "flagged", "unchecked", "error" or "timeout", flags, findings,
            message, seconds, ...) is returned as it is, but for a final out of memory (above).

    Raises:
        ValueError: `jobs` below 1.
        KeyboardInterrupt: re-raised after the running checks' children are killed; what finished
            before is stored.
    """
    if check is None:
        from kb_agent.evaluator.runner import check_problem as check
    results: dict[int, dict[str, Any]] = {}

    def finish(i: int, result: dict[str, Any]) -> None:
        if ran_out_of_memory(result):  # final (alone, or the only check): the machine's memory is too small
            unchecked = {"reason": "memory", "message": result["message"]}
            result = {**result, "status": "unchecked", "unchecked": unchecked}
        results[i] = result
        if store is not None and result.get("status") in FINDING_STATUSES:
            store.record_problem_check(result)
        if on_result is not None:
            on_result(problems[i], result)

    run_pooled(problems, settings, jobs, check, finish)
    return [results[i] for i in range(len(problems))]


def run_pooled(
    problems: Sequence[Problem],
    settings: EvalSettings,
    jobs: int,
    fn: CheckFn,
    finish: Callable[[int, dict[str, Any]], None],
) -> None:
    """`fn(problem, settings)` for each of `problems`, `jobs` at once through `check_pool` (jobs that
    time nothing: problem checks, `kb-agent baseline`'s warm-up compilations), and `finish(i, result)`
    with each final result, i the problem's index, in the order of `problems`. With `jobs` above 1, a
    problem whose result ran out of memory (`ran_out_of_memory`) runs again alone after all the others
    and finishes with that second result. Returns once every child has ended.

    Raises:
        ValueError: `jobs` below 1.
        KeyboardInterrupt (or whatever `fn` or `finish` raise): re-raised after the children of the
            running calls are killed; no queued call starts.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, got {jobs}")
    pool = check_pool(settings, jobs, fn)

    def run(p: Problem) -> dict[str, Any]:
        return pool.run(EvalJob(p, "", settings, kind="check_problem"))

    retry: list[int] = []  # out of memory beside other jobs: run again alone at the end
    threads = ThreadPoolExecutor(max_workers=jobs)
    try:
        for i, result in enumerate(threads.map(run, problems)):
            if jobs > 1 and ran_out_of_memory(result):
                log.info("%s ran out of memory beside other jobs; it runs again alone", problems[i].key)
                retry.append(i)
            else:
                finish(i, result)
        for i in retry:
            finish(i, run(problems[i]))
    except BaseException:  # Ctrl-C or SIGTERM: no child is left running, none queued starts
        threads.shutdown(wait=False, cancel_futures=True)
        _kill_children_until_idle(threads)
        raise
    threads.shutdown()


def check_pool(settings: EvalSettings, jobs: int, check: CheckFn) -> EvalPool:
    """The pool `check_problems` runs `check` through: `jobs` CPU slots on the CPU; on CUDA one GPU per
    visible GPU (`settings.device` "cuda:N": that one), each shared by up to ceil(jobs / GPUs) checks."""

    def run_job(job: EvalJob) -> dict[str, Any]:
        return check(job.problem, job.settings)

    if settings.device == "cpu":
        return EvalPool(settings, cpu_slots=jobs, run_job=run_job)
    gpus = 1 if settings.device.startswith("cuda:") else max(1, visible_gpus())
    return EvalPool(settings, gpus=gpus, per_gpu=-(-jobs // gpus), run_job=run_job)


def _kill_children_until_idle(pool: ThreadPoolExecutor, seconds: float = 10.0) -> None:
    """Kill the evaluation children of `pool`'s threads until its threads are done (a thread may be
    starting a child as the others are killed)."""
    from kb_agent.evaluator.runner import kill_live_children

    deadline = time.monotonic() + seconds
    while True:
        kill_live_children()
        if not any(t.is_alive() for t in getattr(pool, "_threads", ())) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


__all__ = ["FINDING_STATUSES", "check_pool", "check_problems", "ran_out_of_memory", "run_pooled"]
