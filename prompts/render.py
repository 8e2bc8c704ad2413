"""Rendering the prompt templates: `render("feedback_correct", runtime_ms=..., ...)`.

Templates are text files in `prompts/templates/` (package data) with `string.Template` placeholders
(`$name` or `${name}`; a literal dollar is `$$`). Rendering is strict: a placeholder without a value
raises `PromptError`, never an empty string. Extra values are ignored, so one set of variables can
serve several templates.
"""

from __future__ import annotations

import string
from functools import cache
from importlib import resources

EXAMPLE_MARKER = "# ==== answer ===="
BACKENDS = ("cuda", "triton")


class PromptError(LookupError):
    """A template or example that does not exist, or a template rendered without one of its variables."""


def template_names() -> list[str]:
    """Names of the templates (file names without `.txt`), sorted."""
    folder = resources.files("kb_agent.prompts") / "templates"
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt"))


@cache
def template_text(name: str) -> str:
    """The raw text of template `name` (with or without `.txt`). Raises PromptError if there is none."""
    stem = name[:-4] if name.endswith(".txt") else name
    path = resources.files("kb_agent.prompts") / "templates" / f"{stem}.txt"
    if not path.is_file():
        raise PromptError(f"no prompt template {stem!r}; templates: {', '.join(template_names())}")
    return path.read_text(encoding="utf-8")


def placeholders(name: str) -> set[str]:
    """The variables template `name` needs."""
    pattern = string.Template.pattern
    found = set()
    for m in pattern.finditer(template_text(name)):
        var = m.group("named") or m.group("braced")
        if var:
            found.add(var)
    return found


def render(name: str, **variables: object) -> str:
    """Template `name` with `variables` substituted (`str()` of each value).

    Raises PromptError naming the template and the variable when one is missing, or when the template
    has a malformed placeholder.
    """
    stem = name[:-4] if name.endswith(".txt") else name
    template = string.Template(template_text(stem))
    try:
        return template.substitute({k: str(v) for k, v in variables.items()})
    except KeyError as e:
        raise PromptError(f"template {stem!r} needs variable {e.args[0]!r}, which was not given") from None
    except ValueError as e:
        raise PromptError(f"template {stem!r} has a malformed placeholder: {e}") from None


@cache
def example_source(backend: str) -> str:
    """The whole worked-example file for `backend` ("cuda" or "triton")."""
    if backend not in BACKENDS:
        raise PromptError(f"no worked example for backend {backend!r}; backends: {', '.join(BACKENDS)}")
    return (resources.files("kb_agent.prompts") / "examples" / f"{backend}_example.py").read_text(
        encoding="utf-8"
    )


def example_parts(backend: str) -> tuple[str, str]:
    """The worked example for `backend` split into (reference, answer), each a complete module.

    The file's leading comment lines (lint settings, a note on the layout) are left out.
    """
    text = example_source(backend)
    if EXAMPLE_MARKER not in text:
        raise PromptError(f"{backend}_example.py has no {EXAMPLE_MARKER!r} line")
    reference, answer = text.split(EXAMPLE_MARKER, 1)
    lines = reference.splitlines()
    while lines and (lines[0].startswith("#") or not lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines).strip() + "\n", answer.strip() + "\n"


__all__ = [
    "BACKENDS",
    "EXAMPLE_MARKER",
    "PromptError",
    "example_parts",
    "example_source",
    "placeholders",
    "render",
    "template_names",
    "template_text",
]
