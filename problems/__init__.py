"""KernelBench problems: `Problem` records and the specs (`2/40`, `2`, `1/1-10,95`, `toy/relu`, a path)
that name them. Knows nothing about evaluation."""

from kb_agent.problems.problem import Problem, ProblemError
from kb_agent.problems.sources import HUB_DATASET, available_levels, load_level, open_dataset, toy_problems
from kb_agent.problems.spec import check_reference_source, problem_from_file, resolve, resolve_one

__all__ = [
    "HUB_DATASET",
    "Problem",
    "ProblemError",
    "available_levels",
    "check_reference_source",
    "load_level",
    "open_dataset",
    "problem_from_file",
    "resolve",
    "resolve_one",
    "toy_problems",
]
