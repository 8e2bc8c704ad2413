"""Problem specs: the strings users type to name problems.

Grammar (whitespace ignored, except in paths):
    2/40         level 2, problem_id 40 (looked up by id, never by row position)
    2            all of level 2
    1/1-10,95    a list of ids and inclusive ranges
    1/37,2/9-12  several levels: an item with a slash starts the next level's list
    toy          all of kb-agent's own toy problems (level 0); `toy/relu` or `toy/1` names one
    path.py      a file in KernelBench format (`class Model`, `get_inputs`, `get_init_inputs`)
    folder/      every such .py file in a folder, by file name
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from kb_agent.problems.problem import Problem, ProblemError
from kb_agent.problems.sources import available_levels, load_level, toy_problems

_IDS_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
_MAX_RANGE = 10_000  # KernelBench levels hold 50 to 100 problems


def _parse_ids(text: str, spec: str) -> list[int]:
    if not _IDS_RE.match(text):
        raise ProblemError(f"bad problem spec {spec!r}: ids must look like 40, 1-10 or 1-10,95")
    ids: dict[int, None] = {}  # ordered, each id once
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ProblemError(f"bad problem spec {spec!r}: range {part} runs backwards")
        if b - a > _MAX_RANGE:
            raise ProblemError(f"bad problem spec {spec!r}: range {part} is longer than any level")
        ids.update(dict.fromkeys(range(a, b + 1)))
    return list(ids)


def _ranges(ids: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    out, start = [], None
    for i, x in enumerate(ids):
        if start is None:
            start = x
        if i + 1 == len(ids) or ids[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


def check_reference_source(code: str, where: str) -> None:
    """Raise ProblemError unless `code` parses and defines Model, get_inputs and get_init_inputs."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise ProblemError(f"{where} is not valid Python (line {e.lineno}: {e.msg})") from e
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in REQUIRED_NAMES if n not in defined]
    if missing:
        raise ProblemError(
            f"{where} is not a KernelBench problem: it lacks {', '.join(missing)} "
            "(needs class Model(nn.Module), get_inputs() and get_init_inputs())"
        )


def problem_from_file(path: str | os.PathLike) -> Problem:
    p = Path(path)
    if not p.is_file():
        raise ProblemError(f"no such file: {str(p)!r}")
    try:
        code = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ProblemError(f"{str(p)!r} is not UTF-8 text; save the reference as a UTF-8 .py file") from None
    check_reference_source(code, str(p))
    m = re.match(r"^(\d+)_", p.stem)
    return Problem(None, int(m.group(1)) if m else 0, p.stem, code, str(p.resolve()))


def _select_toy(rest: str, spec: str) -> list[Problem]:
    toys = toy_problems()
    if not rest:
        return list(toys.values())
    # by its name (`relu`), its id (`1`) or both as the file and this function's own error list them
    by_name = {p.name: p for p in toys.values()} | {f"{p.problem_id}_{p.name}": p for p in toys.values()}
    out = []
    for item in rest.split(","):
        item = item.strip()
        if item in by_name:
            out.append(by_name[item])
        elif item.isdigit() and int(item) in toys:
            out.append(toys[int(item)])
        else:
            names = ", ".join(f"{p.problem_id}_{p.name}" for p in toys.values())
            raise ProblemError(f"no toy problem {item!r}; toy problems: {names}")
    return list({p.key: p for p in out}.values())  # a problem named twice is one problem


def _split_levels(spec: str) -> list[str]:
    """'1/94-100,2/36,42' -> ['1/94-100', '2/36,42']: an item with a slash starts a new part."""
    parts: list[str] = []
    for item in spec.split(","):
        if "/" in item or not parts:
            parts.append(item)
        else:
            parts[-1] += "," + item
    return parts


def resolve(spec: str, dataset: str | os.PathLike | None = None) -> list[Problem]:
    """Turn a spec into problems, in the order the spec names them (levels sorted by problem_id).

    Args:
        spec: see the module docstring.
        dataset: a local KernelBench copy; default `$KB_DATASET`, else the Hub.

    Raises:
        ProblemError: a malformed spec, a level or id that does not exist (the message names what
            does), a file that is not in KernelBench format, or a dataset that cannot be read.
    """
    raw = spec.strip()
    if raw and Path(raw).is_dir():
        files = sorted(Path(raw).glob("*.py"))
        if not files:
            raise ProblemError(
                f"no .py files in {raw!r}; a folder spec checks every KernelBench-format file in it"
            )
        return [problem_from_file(f) for f in files]
    if raw.endswith(".py") or os.path.sep in raw and Path(raw).exists():  # a path: spaces are its own
        return [problem_from_file(raw)]
    if raw.startswith(("/", "./", "../", "~")):
        raise ProblemError(f"no such file or folder: {raw!r}")
    s = raw.replace(" ", "")
    if not s:
        raise ProblemError("empty problem spec; try 2/40, 2, 1/1-10,95, toy or a path to a .py file")
    parts = _split_levels(s)
    if len(parts) > 1:
        found: dict[str, Problem] = {}
        for part in parts:
            try:
                resolved = resolve(part, dataset)
            except ProblemError as e:
                raise ProblemError(f"{e} (in {spec.strip()!r})") from None
            for p in resolved:
                found.setdefault(p.key, p)  # a problem named twice is one problem
        return list(found.values())
    head, _, rest = s.partition("/")
    if head == "toy":
        return _select_toy(rest, spec)
    if not head.isdigit():
        raise ProblemError(
            f"bad problem spec {spec!r}: expected LEVEL/ID like 2/40, a level like 2, a list like "
            "1/1-10,95, toy/NAME, or a path to a .py file"
        )
    level = int(head)
    if level == 0:
        return _select_toy(rest, spec)
    if level not in available_levels(dataset):
        have = ", ".join(map(str, available_levels(dataset)))
        raise ProblemError(f"level {level} does not exist; levels: {have} (and toy)")
    problems = load_level(level, dataset)
    if not rest:
        if "/" in s:
            raise ProblemError(
                f"bad problem spec {spec!r}: no ids after '{level}/'; name them (1/40) or drop the slash for the whole level"
            )
        return problems
    by_id = {p.problem_id: p for p in problems}
    ids = _parse_ids(rest, spec)
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ProblemError(
            f"level {level} has no problem {_ranges(missing)}; its ids are {_ranges(sorted(by_id))}"
        )
    return [by_id[i] for i in dict.fromkeys(ids)]  # a problem named twice is one problem


def resolve_one(spec: str, dataset: str | os.PathLike | None = None) -> Problem:
    """Like `resolve`, for a spec that must name exactly one problem."""
    found = resolve(spec, dataset)
    if len(found) != 1:
        raise ProblemError(f"{spec!r} names {len(found)} problems; name one, like 2/40")
    return found[0]
